"""Runs the SAM transform offline over template.yaml (what CloudFormation does at deploy).

cfn-lint and `sam validate --lint` do not run the transform, so a template they accept
can still be rejected at deploy (a `!If` under `HttpApi.Auth`, say). This runs
`samtranslator`'s own `transform()` with a stub managed-policy loader, for each parameter
set given, and fails on any error. The local `CodeUri` of an un-packaged template (which
`sam build` / `sam package` replace with an S3 location) is replaced by a placeholder S3
URI first, so the functions are translated in full rather than stopping at it.

    python infra/sam_transform.py template.yaml
"""

import os
import sys

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samtranslator.model.exceptions import InvalidDocumentException  # noqa: E402
from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402


class NoManagedPolicies:
    """The template uses inline policies only; the loader is never asked for ARNs."""

    def load(self):
        return {}


# Parameter sets that change what the transform sees (conditions).
PARAMETER_SETS = [
    {"JwtIssuer": "https://idp.example.com/", "MultiTenant": "true"},
    {"JwtIssuer": "https://idp.example.com/", "MultiTenant": "false", "VpcSubnetIds": "subnet-1,subnet-2", "VpcSecurityGroupIds": "sg-1"},
]


def packaged(template):
    """The template as `sam package` would leave it: function code in S3."""
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {})["CodeUri"] = "s3://fetcher-build/bootstrap.zip"
    return template


def message_age_covers_redeliveries(template):
    """A job message must still be trusted at its last delivery: its maximum age exceeds
    the queue's visibility timeout times its receive count, for every timeout choice."""
    receives = template["Resources"]["JobQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"]
    ok = True
    for timeout, row in template["Mappings"]["ByExtractTimeout"].items():
        if row["MessageMaxAge"] <= row["QueueVisibility"] * receives:
            print(f"ExtractTimeoutSeconds={timeout}: MessageMaxAge {row['MessageMaxAge']} does not exceed "
                  f"{row['QueueVisibility']} x {receives} receives", file=sys.stderr)
            ok = False
    return ok


def main(path):
    with open(path) as f:
        text = f.read()
    failed = not message_age_covers_redeliveries(yaml_parse(text))
    for params in PARAMETER_SETS:
        try:
            out = transform(packaged(yaml_parse(text)), params, NoManagedPolicies())
        except InvalidDocumentException as e:
            for cause in e.causes:
                print(f"SAM transform ({params}): {cause.message}", file=sys.stderr)
            failed = True
            continue
        resources = out.get("Resources", {})
        print(f"SAM transform ({params}): {len(resources)} resources", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "template.yaml"))
