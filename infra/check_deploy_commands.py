"""Checks, offline, that every `sam deploy --config-env <stage>` command the README and
docs/operations.md give keeps that stage's settings from samconfig.toml.

The SAM CLI treats a `--parameter-overrides` given on the command line as a replacement
for the stage's `parameter_overrides`, not an addition (aws/aws-sam-cli#2380): a command
that adds `JwtIssuer=…` alone deploys every other parameter at the template's default.
This reads each command (line continuations joined, `$(scripts/stage-parameters X)`
expanded by running it), works out the overrides SAM would use, and fails unless each
of the stage's `Key=value` pairs is among them with the same value.

    python infra/check_deploy_commands.py
"""

import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DOCS = ("README.md", "docs/operations.md")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def stage_parameters(stage):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "stage-parameters"), stage],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def commands(text):
    """The `sam deploy` commands of the fenced shell blocks, continuations joined."""
    for block in re.findall(r"```(?:sh|bash)?\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            for part in re.split(r"&&|;", line):
                part = part.strip()
                if part.startswith("sam deploy"):
                    yield part


def effective_overrides(command):
    """`(stage, overrides SAM would use or None for the stage's own, guided)`."""
    expanded = re.sub(r"\$\(scripts/stage-parameters (\w+)\)", lambda m: stage_parameters(m.group(1)), command)
    words = shlex.split(expanded)
    stage, overrides, guided = "default", None, False
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--config-env":
            stage = words[i + 1]
            i += 2
            continue
        if w == "--guided":
            guided = True
        if w == "--parameter-overrides":
            overrides = {}
            i += 1
            while i < len(words) and not words[i].startswith("--"):
                k, _, v = words[i].partition("=")
                overrides[k] = v
                i += 1
            continue
        i += 1
    return stage, overrides, guided


def main():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    failed, checked = False, 0
    for doc in DOCS:
        with open(os.path.join(ROOT, doc)) as f:
            text = f.read()
        for command in commands(text):
            stage, overrides, guided = effective_overrides(command)
            if guided or overrides is None:
                continue  # the stage's own overrides apply (or the guided prompts show them)
            checked += 1
            wanted = dict(kv.split("=", 1) for kv in stage_parameters(stage).split())
            lost = {k: v for k, v in wanted.items() if overrides.get(k) != v}
            if lost:
                failed = True
                print(f"{doc}: `{command}` drops the {stage} stage's " +
                      ", ".join(f"{k}={v}" for k, v in lost.items()), file=sys.stderr)
    if checked == 0:
        print("check_deploy_commands: no sam deploy command with --parameter-overrides found", file=sys.stderr)
        return 1
    if not failed:
        print(f"deploy commands: {checked} keep their stage's settings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
