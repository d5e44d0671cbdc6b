//! The cloud providers' own service addresses: instance metadata, credentials, DNS
//! resolvers and time servers. Host safety refuses them whatever the operator's
//! private-network list says (a list that names one stops the start; a list that merely
//! contains one, such as `fc00::/7` or `100.64.0.0/10`, still never reaches it), and in
//! multi-tenant mode they are refused even where they are public addresses.
//!
//! One list, with where each entry comes from; docs/datasources.md ("Host safety")
//! repeats it for users.

use std::net::IpAddr;

use ipnet::IpNet;

/// `(network, provider and service)`; the sources are the comments above each group.
pub const CLOUD_SERVICE_NETWORKS: &[(&str, &str)] = &[
    // AWS: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html,
    // .../set-time.html, https://docs.aws.amazon.com/vpc/latest/userguide/AmazonDNS-concepts.html,
    // https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4.html,
    // https://docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html
    (
        "169.254.169.254/32",
        "AWS, GCP, Azure, OCI, DigitalOcean, OpenStack instance metadata",
    ),
    ("169.254.169.253/32", "AWS Route 53 Resolver (Amazon DNS)"),
    ("169.254.169.123/32", "AWS Time Sync Service"),
    ("169.254.170.2/32", "AWS ECS task metadata and credentials"),
    ("169.254.170.23/32", "AWS EKS Pod Identity agent"),
    // The whole fd00:ec2::/32 is AWS's Nitro service prefix (IMDS ::254, DNS ::253,
    // time ::123, EKS Pod Identity ::23): refused as one block.
    (
        "fd00:ec2::/32",
        "AWS IPv6 instance metadata, DNS, time, Pod Identity",
    ),
    // GCP: https://cloud.google.com/compute/docs/metadata/querying-metadata (IPv6 endpoint)
    ("fd20:ce::254/128", "GCP IPv6 metadata server"),
    // Azure: https://learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16
    (
        "168.63.129.16/32",
        "Azure WireServer, DNS and health probes",
    ),
    // Alibaba Cloud: https://www.alibabacloud.com/help/ecs/user-guide/view-instance-metadata,
    // https://www.alibabacloud.com/help/ecs/user-guide/alibaba-cloud-ntp-server
    ("100.100.100.200/32", "Alibaba Cloud instance metadata"),
    ("100.100.2.136/32", "Alibaba Cloud DNS"),
    ("100.100.2.138/32", "Alibaba Cloud DNS"),
    ("100.100.3.0/24", "Alibaba Cloud NTP"),
    // Oracle Cloud: https://docs.oracle.com/iaas/Content/Compute/Tasks/gettingmetadata.htm
    ("192.0.0.192/32", "Oracle Cloud legacy metadata"),
    // Oracle Cloud IPv6: the same page ("IPv6 … http://[fd00:c1::a9fe:a9fe]/opc/v2/").
    (
        "fd00:c1::a9fe:a9fe/128",
        "Oracle Cloud IPv6 instance metadata",
    ),
    // Alibaba Cloud IPv6: the metadata page above (IPv6 endpoint of 100.100.100.200).
    (
        "fd00:100::100:200/128",
        "Alibaba Cloud IPv6 instance metadata",
    ),
    // Tencent Cloud: https://www.tencentcloud.com/document/product/213/4934
    ("169.254.0.23/32", "Tencent Cloud instance metadata"),
    // Akamai (Linode): https://techdocs.akamai.com/cloud-computing/docs/overview-of-the-metadata-service
    // (169.254.169.254 above, and IPv6 fd00:a9fe:a9fe::1).
    ("fd00:a9fe:a9fe::1/128", "Akamai (Linode) IPv6 metadata"),
    // Scaleway: https://www.scaleway.com/en/developers/api/instance/#metadata-api
    // (169.254.42.42 and IPv6 fd00:42::42).
    ("169.254.42.42/32", "Scaleway instance metadata"),
    ("fd00:42::42/128", "Scaleway IPv6 instance metadata"),
    // OpenStack: https://docs.openstack.org/nova/latest/user/metadata.html (IPv6
    // link-local metadata fe80::a9fe:a9fe).
    ("fe80::a9fe:a9fe/128", "OpenStack IPv6 metadata"),
    // Huawei Cloud: https://support.huaweicloud.com/intl/en-us/dns_faq/dns_faq_002.html and
    // https://support.huaweicloud.com/intl/en-us/ecs_faq/ecs_faq_0908.html (private DNS and
    // NTP servers in 100.125.0.0/16).
    ("100.125.0.0/16", "Huawei Cloud internal DNS and NTP"),
    // IBM Cloud: https://cloud.ibm.com/docs/vpc?topic=vpc-service-endpoints-for-vpc (DNS
    // 161.26.0.10/.11, NTP 161.26.0.6, in the service network 161.26.0.0/16: public space).
    ("161.26.0.0/16", "IBM Cloud service network (DNS, NTP)"),
];

/// Host names of the same services, refused before any DNS lookup.
pub const CLOUD_SERVICE_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata.gcp.internal",
    "metadata.azure.internal",
    "metadata.tencentyun.com",
    "instance-data",
    "instance-data.ec2.internal",
    "169.254.169.254",
];

fn networks() -> impl Iterator<Item = IpNet> {
    CLOUD_SERVICE_NETWORKS
        .iter()
        .map(|(net, _)| net.parse::<IpNet>().expect("a valid built-in network"))
}

/// Whether `ip` is a cloud service address. An IPv6 address that reaches an IPv4 one
/// (mapped, SIIT, NAT64, 6to4) is judged by its IPv4 form.
pub fn is_cloud_service(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => crate::host::translated_ipv4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    networks().any(|n| n.contains(&ip))
}

/// The cloud service network that holds all of `net`, if one does (an operator list that
/// names a service address): its CIDR and what it is.
pub fn named_by(net: &IpNet) -> Option<(&'static str, &'static str)> {
    CLOUD_SERVICE_NETWORKS
        .iter()
        .zip(networks())
        .find(|(_, service)| service.contains(net))
        .map(|((cidr, what), _)| (*cidr, *what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_dns_and_time_addresses_in_every_form() {
        for a in [
            "169.254.169.254",
            "fd00:ec2::254",
            "fd00:ec2::253",
            "fd00:ec2::23",
            "fd00:ec2::123",
            "100.100.100.200",
            "::ffff:100.100.100.200",
            "::ffff:169.254.169.254",
            "64:ff9b::100.100.100.200",
            "168.63.129.16",
            // 6to4 of Azure's public WireServer address.
            "2002:a83f:8110::1",
            "fd20:ce::254",
            // #52 item 4: the providers' IPv6 endpoints and the DNS/NTP networks.
            "fd00:c1::a9fe:a9fe",
            "fd00:a9fe:a9fe::1",
            "fd00:42::42",
            "169.254.42.42",
            "fd00:100::100:200",
            "fe80::a9fe:a9fe",
            "100.125.1.250",
            "100.125.0.251",
            "::ffff:100.125.1.250",
            "161.26.0.10",
            "161.26.0.6",
            "64:ff9b::161.26.0.11",
        ] {
            assert!(is_cloud_service(a.parse().unwrap()), "{a}");
        }
        for a in ["100.100.100.201", "fd00:ec3::254", "10.0.0.5", "8.8.8.8"] {
            assert!(!is_cloud_service(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn a_list_entry_inside_a_service_network_is_named() {
        assert!(named_by(&"fd00:ec2::254/128".parse().unwrap()).is_some());
        assert!(named_by(&"fd00:ec2::/32".parse().unwrap()).is_some());
        assert!(named_by(&"100.100.100.200/32".parse().unwrap()).is_some());
        for entry in [
            "fd00:c1::a9fe:a9fe/128",
            "fd00:a9fe:a9fe::1/128",
            "fd00:42::42/128",
            "fd00:100::100:200/128",
            "100.125.0.0/16",
            "100.125.1.0/24",
            "161.26.0.0/16",
        ] {
            assert!(named_by(&entry.parse().unwrap()).is_some(), "{entry}");
        }
        // A wider list contains them but does not name them: accepted, refused at dial.
        assert!(named_by(&"fc00::/7".parse().unwrap()).is_none());
        assert!(named_by(&"100.64.0.0/10".parse().unwrap()).is_none());
    }
}
