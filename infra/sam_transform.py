"""Runs the SAM transform offline over template.yaml (what CloudFormation does at deploy),
for every combination of the parameters that drive the template's Conditions, resolves
those Conditions, and lints each resolved result with cfn-lint.

cfn-lint and `sam validate --lint` read the literal template: a `!If` stays a `!If`, so a
property that is only wrong in one branch (two equal managed policy ARNs once `HasVpc`
holds, say) passes them and fails at deploy. This runs `samtranslator`'s own
`transform()` with a stub managed-policy loader for each parameter combination, then
evaluates the Conditions with those values: `Fn::If` picks its branch, `AWS::NoValue`
disappears, resources and outputs whose condition is false are dropped and `Fn::Sub`
strings over pseudo parameters only become literals (so a SAM-added ARN and ours compare
equal). Each resolved template is written out and linted as plain CloudFormation, all in
one cfn-lint run. The local `CodeUri` of an un-packaged template (which `sam build` /
`sam package` replace with an S3 location) is replaced by a placeholder S3 URI first, so
the functions are translated in full rather than stopping at it.

    python infra/sam_transform.py template.yaml [--cfn-lint PATH] [--out DIR]
"""

import argparse
import itertools
import json
import logging
import os
import re
import subprocess
import sys
import tempfile

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
# samtranslator warns about its own unpublished usage metrics on every transform.
logging.getLogger("samtranslator").setLevel(logging.ERROR)

from samtranslator.model.exceptions import InvalidDocumentException  # noqa: E402
from samtranslator.translator.transform import transform  # noqa: E402
from samtranslator.yaml_helper import yaml_parse  # noqa: E402


class NoManagedPolicies:
    """The template uses inline policies only; the loader is never asked for ARNs."""

    def load(self):
        return {}


# Values every combination carries (a required parameter without a default).
BASE = {"JwtIssuer": "https://idp.example.com/"}

# A value other than the default for each parameter a Condition reads; the combinations
# take each parameter at its default and at this value. A parameter with AllowedValues
# takes each of those instead.
ALTERNATIVES = {
    "AlarmEmail": "ops@example.com",
    "VpcSubnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210",
    "ExtractReservedConcurrency": "20",
    "ExtractMaxJobsPerTenant": "3",
    "ApiReservedConcurrency": "50",
    "PrivateNetworkCidrs": "10.0.0.0/16,172.31.0.0/16",
}

# Parameters set together with another (no condition of their own reads them).
COMPANIONS = {
    "VpcSubnetIds": {"VpcSecurityGroupIds": "sg-0123456789abcdef0"},
    "Tracing": {
        "AdotCollectorLayerArn": "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-collector-amd64-ver-0-117-0:1",
        "OtlpEndpoint": "https://collector.example.com:4318",
    },
}

PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::URLSuffix": "amazonaws.com",
}


def packaged(template):
    """The template as `sam package` would leave it: function code in S3."""
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {})["CodeUri"] = "s3://fetcher-build/bootstrap.zip"
    return template


def refs(node):
    """Every `Ref` name under `node`."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "Ref" and isinstance(v, str):
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def condition_parameters(template):
    """The parameters the Conditions read, in template order."""
    params = template.get("Parameters", {})
    seen = set(refs(template.get("Conditions", {})))
    return [p for p in params if p in seen]


def combinations(template):
    """Every combination of the condition-driving parameters (default or alternative,
    or each allowed value), each with the base values and companions."""
    params = template.get("Parameters", {})
    axes = []
    for name in condition_parameters(template):
        spec = params[name]
        if "AllowedValues" in spec:
            values = [str(v) for v in spec["AllowedValues"]]
        else:
            if name not in ALTERNATIVES:
                raise SystemExit(f"infra/sam_transform.py: no alternative value for {name}, which a Condition reads")
            values = [str(spec.get("Default", "")), ALTERNATIVES[name]]
        axes.append([(name, v) for v in dict.fromkeys(values)])
    for combo in itertools.product(*axes):
        values = dict(BASE)
        for name, value in combo:
            values[name] = value
            if value != str(params[name].get("Default", "")):
                values.update(COMPANIONS.get(name, {}))
        yield values


def parameter_value(template, values, name):
    spec = template["Parameters"][name]
    raw = values.get(name, spec.get("Default", ""))
    if spec.get("Type") == "CommaDelimitedList":
        return [] if raw in ("", None) else [s.strip() for s in str(raw).split(",")]
    return str(raw)


def evaluate(template, values, expr, conditions):
    """The value of a Condition expression with these parameter values."""
    if isinstance(expr, dict) and len(expr) == 1:
        (op, arg), = expr.items()
        if op == "Condition":
            return conditions[arg]
        if op == "Ref":
            if arg in PSEUDO:
                return PSEUDO[arg]
            return parameter_value(template, values, arg)
        if op == "Fn::Equals":
            a, b = (evaluate(template, values, x, conditions) for x in arg)
            return str(a) == str(b)
        if op == "Fn::Not":
            return not evaluate(template, values, arg[0], conditions)
        if op == "Fn::And":
            return all(evaluate(template, values, x, conditions) for x in arg)
        if op == "Fn::Or":
            return any(evaluate(template, values, x, conditions) for x in arg)
        if op == "Fn::Join":
            sep, items = arg
            items = evaluate(template, values, items, conditions)
            if not isinstance(items, list):
                items = [items]
            return sep.join(str(evaluate(template, values, x, conditions)) for x in items)
        raise SystemExit(f"infra/sam_transform.py: cannot evaluate {op} in a Condition")
    if isinstance(expr, list):
        return [evaluate(template, values, x, conditions) for x in expr]
    return expr


def conditions_of(template, values):
    """Every Condition's value, in dependency order."""
    pending = dict(template.get("Conditions", {}))
    out = {}
    while pending:
        progressed = False
        for name, expr in list(pending.items()):
            try:
                out[name] = evaluate(template, values, expr, out)
            except KeyError:
                continue
            del pending[name]
            progressed = True
        if not progressed:
            raise SystemExit(f"infra/sam_transform.py: circular Conditions {sorted(pending)}")
    return out


NO_VALUE = object()
PSEUDO_ONLY = re.compile(r"\$\{(AWS::[A-Za-z]+)\}")


def resolve(node, conditions):
    """`node` with every `Fn::If` decided and `AWS::NoValue` removed; `Fn::Sub` over
    pseudo parameters only becomes its literal."""
    if isinstance(node, dict):
        if len(node) == 1:
            (k, v), = node.items()
            if k == "Fn::If":
                cond, yes, no = v
                return resolve(yes if conditions[cond] else no, conditions)
            if k == "Ref" and v == "AWS::NoValue":
                return NO_VALUE
            if k == "Fn::Sub" and isinstance(v, str):
                names = PSEUDO_ONLY.findall(v)
                if "${" not in PSEUDO_ONLY.sub("", v) and all(n in PSEUDO for n in names):
                    return PSEUDO_ONLY.sub(lambda m: PSEUDO[m.group(1)], v)
        out = {}
        for k, v in node.items():
            r = resolve(v, conditions)
            if r is not NO_VALUE:
                out[k] = r
        return out
    if isinstance(node, list):
        return [r for r in (resolve(v, conditions) for v in node) if r is not NO_VALUE]
    return node


def resolved(translated, values):
    """The translated template under these parameter values: no Conditions left."""
    conditions = conditions_of(translated, values)
    out = {k: v for k, v in translated.items() if k != "Conditions"}
    for section in ("Resources", "Outputs"):
        kept = {}
        for name, body in translated.get(section, {}).items():
            cond = body.get("Condition")
            if cond is not None and not conditions[cond]:
                continue
            body = {k: v for k, v in body.items() if k != "Condition"}
            kept[name] = resolve(body, conditions)
        if kept:
            out[section] = kept
    # The combination's values become the defaults (cfn-lint resolves a `Ref` with its
    # default), and a parameter only a dropped branch read goes with it.
    used = set(refs({k: v for k, v in out.items() if k != "Parameters"}))
    params = {}
    for name, spec in translated.get("Parameters", {}).items():
        if name not in used:
            continue
        spec = dict(spec)
        if name in values:
            spec["Default"] = values[name]
        params[name] = spec
    out["Parameters"] = params
    return out


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


# What an operator relies on, checked on every resolved template (each a rule of
# docs/operations.md).
STATEFUL = ("StoreTable", "ResultsBucket", "MasterKey", "MasterKeySecret")
OUTPUTS = ("ApiUrl", "EventBusName", "JobQueueUrl", "JobDeadLetterQueueUrl", "EventsDeadLetterQueueUrl",
           "ResultsBucketName", "StoreTableName", "AlarmTopicArn", "ApiFunctionName", "ExtractFunctionName",
           "MasterKeySecretArn", "MasterKeyArn")


def statements(role):
    for policy in role.get("Properties", {}).get("Policies", []):
        st = policy.get("PolicyDocument", {}).get("Statement", [])
        yield from (st if isinstance(st, list) else [st])


def as_list(v):
    return v if isinstance(v, list) else [v]


def operator_rules(t, values):
    """The problems of one resolved template (empty when it keeps every rule)."""
    problems = []
    res = t.get("Resources", {})
    for name, r in res.items():
        kind, props = r.get("Type"), r.get("Properties", {})
        if kind == "AWS::IAM::Role":
            for arn in props.get("ManagedPolicyArns", []):
                if isinstance(arn, str) and arn.endswith("/AWSLambdaSQSQueueExecutionRole"):
                    problems.append(f"{name}: AWSLambdaSQSQueueExecutionRole grants SQS on every queue")
            for st in statements(r):
                actions = [a for a in as_list(st.get("Action", [])) if isinstance(a, str)]
                if any(a.lower().startswith("sqs:") for a in actions) and "*" in as_list(st.get("Resource")):
                    problems.append(f"{name}: SQS actions on Resource *")
        if kind == "AWS::CloudWatch::Alarm":
            for key in ("AlarmActions", "OKActions"):
                if not props.get(key):
                    problems.append(f"{name}: no {key}")
            metrics = [props] + [m.get("MetricStat", {}).get("Metric", {}) for m in props.get("Metrics", [])]
            for m in metrics:
                if m.get("Namespace") == "Fetcher" and "Stack" not in [d.get("Name") for d in m.get("Dimensions", [])]:
                    problems.append(f"{name}: a Fetcher metric without the Stack dimension (stages would share it)")
        if kind == "AWS::Events::Rule":
            for target in props.get("Targets", []):
                if "DeadLetterConfig" not in target:
                    problems.append(f"{name}: target {target.get('Id')} has no dead-letter queue")
        if kind == "AWS::Scheduler::Schedule" and "DeadLetterConfig" not in props.get("Target", {}):
            problems.append(f"{name}: the schedule has no dead-letter queue")
        if kind == "AWS::Lambda::Function" and "ReservedConcurrentExecutions" in props:
            reserved = {"ApiFunction": "ApiReservedConcurrency", "ExtractFunction": "ExtractReservedConcurrency"}
            if values.get(reserved.get(name), "0") == "0":
                problems.append(f"{name}: reserves concurrency by default (a new account's quota has no room)")
    for name in STATEFUL:
        policy = res.get(name, {}).get("DeletionPolicy")
        if policy != "RetainExceptOnCreate":
            problems.append(f"{name}: DeletionPolicy {policy} (a failed first deploy would leave it behind)")
    extract = res.get("ExtractRole", {})
    s3 = {a for st in statements(extract) for a in as_list(st.get("Action", [])) if str(a).startswith("s3:")}
    for needed in ("s3:PutObject", "s3:GetObject", "s3:DeleteObject"):
        if needed not in s3:
            problems.append(f"ExtractRole: lacks {needed}")
    for name in OUTPUTS:
        if name not in t.get("Outputs", {}):
            problems.append(f"no output {name}")
    return problems


def short(values):
    return " ".join(f"{k}={v}" for k, v in values.items() if k not in BASE) or "defaults"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template", nargs="?", default="template.yaml")
    ap.add_argument("--cfn-lint", default=None, help="cfn-lint to run over each resolved template")
    ap.add_argument("--out", default=None, help="directory for the resolved templates (default: a temporary one)")
    args = ap.parse_args()
    with open(args.template) as f:
        text = f.read()
    source = yaml_parse(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        return check(text, source, args.out, args.cfn_lint)
    with tempfile.TemporaryDirectory(prefix="fetcher-resolved-") as out_dir:
        return check(text, source, out_dir, args.cfn_lint)


def check(text, source, out_dir, cfn_lint):
    """Translates, resolves and checks every combination into `out_dir`; 1 on a problem."""
    failed = not message_age_covers_redeliveries(source)
    written = {}
    combos = list(combinations(source))
    for i, values in enumerate(combos):
        try:
            translated = transform(packaged(yaml_parse(text)), values, NoManagedPolicies())
        except InvalidDocumentException as e:
            for cause in e.causes:
                print(f"SAM transform ({short(values)}): {cause.message}", file=sys.stderr)
            failed = True
            continue
        path = os.path.join(out_dir, f"resolved-{i:02d}.json")
        final = resolved(translated, values)
        for problem in operator_rules(final, values):
            print(f"resolved template ({short(values)}): {problem}", file=sys.stderr)
            failed = True
        with open(path, "w") as f:
            json.dump(final, f, indent=1, default=str)
        written[path] = values
    print(f"SAM transform: {len(written)} of {len(combos)} parameter combinations translated "
          f"(over {', '.join(condition_parameters(source))})", flush=True)
    if cfn_lint and written:
        run = subprocess.run([cfn_lint, "--format", "parseable", "--", *written],
                             capture_output=True, text=True)
        for line in run.stdout.splitlines():
            path = line.split(":", 1)[0]
            print(f"resolved template ({short(written.get(path, {}))}): {line}", file=sys.stderr)
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr, end="")
            failed = True
        else:
            print(f"cfn-lint: {len(written)} resolved templates clean", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
