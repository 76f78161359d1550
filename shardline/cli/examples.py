"""An example for every command's ``--help`` (shown as its epilog), kept in one table so
that each reads the same way and a new command without one is caught by a test."""

from __future__ import annotations

import typer

F = "examples/digits.toml"
EXAMPLES: dict[str, str] = {
    "ingest": f"shardline ingest -c {F}",
    "versions": f"shardline versions -c {F} | column -t",
    "up": f"shardline up -c {F}",
    "down": "shardline down",
    "status": "shardline status --env  (then: eval \"$(shardline status --env)\")",
    "deploy": "shardline deploy -c examples/sentinel.toml",
    "undeploy": "shardline undeploy -c examples/sentinel.toml",
    "demo": "shardline demo",
    "train": f"shardline train -c {F} --json",
    "watch": "shardline watch --poll 10",
    "quarantine": f"shardline quarantine -c {F} --limit 20",
    "diff": f"shardline diff -c {F} --from 1 --to 2",
    "compact": f"shardline compact -c {F} --dry-run",
    "migrate": f"shardline migrate -c {F}",
    "verify": f"shardline verify -c {F} --version 2",
    "expire": f"shardline expire -c {F} --keep 30 --dry-run",
    "vacuum": f"shardline vacuum -c {F} --dry-run",
    "audit": f"shardline audit -c {F} --id img-000123",
    "models expire": f"shardline models expire -c {F} --keep 5",
    "upload": f"shardline upload ./my-drop/ -c {F}",
    "example": "shardline example diabetes --out example-data/diabetes  (then: shardline "
               "upload example-data/diabetes -c examples/diabetes.toml)",
    "delete": f"shardline delete -c {F} --ids ids-to-remove.txt",
    "bench": "shardline bench loader --quick",
    "bench loader": "shardline bench loader --quick",
    "bench convert": "shardline bench convert --quick",
    "bench pipeline": "shardline bench pipeline --quick",
    "bench gpu": "shardline bench gpu --quick",
    "bench learning": "shardline bench learning --quick",
    "bench scale": "shardline bench scale --quick",
    "bench all": "shardline bench all --quick",
    "models": f"shardline models -c {F}",
    "models promote": f"shardline models promote 3 -c {F} --reason \"better on night images\"",
    "models rollback": f"shardline models rollback -c {F} --reason \"regression in prod\"",
    "models pin": f"shardline models pin 3 -c {F}",
    "config": f"shardline config check -c {F}",
    "config schema": "shardline config schema -o shardline.schema.json",
    "config check": f"shardline config check -c {F}",
}


def _epilog(name: str) -> str | None:
    example = EXAMPLES.get(name)
    return f"Example: {example}" if example else None


def add_examples(app: typer.Typer) -> list[str]:
    """Set each command's and group's epilog from :data:`EXAMPLES`; returns the names of
    commands that have none."""
    missing = []
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else "")
        info.epilog = info.epilog or _epilog(name)
        missing += [] if info.epilog else [name]
    for group in app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        sub.info.epilog = sub.info.epilog or _epilog(group.name or "")
        missing += [] if sub.info.epilog else [group.name or ""]
        for info in sub.registered_commands:
            name = f"{group.name} {info.name or (info.callback.__name__ if info.callback else '')}"
            info.epilog = info.epilog or _epilog(name)
            missing += [] if info.epilog else [name]
    return missing
