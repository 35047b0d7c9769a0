"""Account labels of ``toposcope slurm exporter`` are bounded: names anyone chooses with
``sbatch -A`` (where Slurm does not enforce accounts) become ``(invalid)`` when they carry
control characters, escape sequences or more than 128 characters, and beyond
``--slurm-max-accounts`` per partition they are summed under ``(other)``.

The exporter runs against stand-in ``sinfo``/``squeue``/``scontrol``/``sshare``/``sprio``
that print the recorded outputs of ``tests/fixtures/slurm`` (3 nodes of 4 GPUs in partition
``gpu``, jobs 1-3 running, 4-6 pending) with hostile accounts written into the jobs, and 1,000
more pending jobs, each of its own account. These run everywhere, Slurm installed or not.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import FIXTURES
from tests.procs import require_binary
from toposcope.cli import main
from toposcope.identity.workload import INVALID_LABEL_VALUE, label_value
from toposcope.queue.accounts import NO_ACCOUNT, OTHER_ACCOUNT, account_labels
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.exporter import QueueCollector
from toposcope.slurm.reader import CommandReader

SAMPLES = FIXTURES / "slurm"
NOW = 1795452000.0
#: what a user may name an account where Slurm does not enforce them
NEWLINE = 'evil"} 1\ntoposcope_fake 1'
ANSI = "\x1b[31mred\x1b[0m"
OSC = "\x1b]0;owned\x07"
LONGEST = "a" * 128  # the rule's longest name: kept
TOO_LONG = "b" * 129
#: the generated accounts, each with one pending job of 1-4 GPUs
MANY = 1000
LIMIT = 100
BUCKETS = {INVALID_LABEL_VALUE, NO_ACCOUNT, OTHER_ACCOUNT}
ACCOUNT_FAMILIES = (
    "toposcope_queue_account_jobs",
    "toposcope_queue_account_allocated_gpus",
    "toposcope_queue_account_allocated_cpus",
    "toposcope_queue_account_pending_gpus",
    "toposcope_queue_account_fair_share_gpus",
    "toposcope_queue_priority_jobs",
)
CONFIG = (
    "Configuration data as of 2026-01-01T00:00:00\n"
    "AccountingStorageType   = accounting_storage/slurmdbd\n"
    "PriorityType            = priority/multifactor\n"
)
#: control characters that must never reach an exposition (tab and newline end lines)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _squeue() -> dict[str, Any]:
    """The recorded ``squeue --json`` with hostile accounts and :data:`MANY` more jobs."""
    answer: dict[str, Any] = json.loads((SAMPLES / "squeue.json").read_text())
    jobs = {job["job_id"]: job for job in answer["jobs"]}
    hostile = {1: OSC, 2: "x\ny", 3: "", 4: NEWLINE, 5: ANSI, 6: TOO_LONG}
    for job_id, account in hostile.items():
        jobs[job_id]["account"] = account
    template = jobs[4]  # pending on Resources, 2 nodes of --gres=gpu:4
    extra = []
    for index in range(MANY):
        job = copy.deepcopy(template)
        job["job_id"] = 1000 + index
        job["account"] = f"acct{index:04d}"
        job["tres_per_node"] = f"gres:gpu:{1 + index % 4}"
        extra.append(job)
    for job_id in (7, 8):  # two 4-GPU jobs: the longest valid name ranks first
        job = copy.deepcopy(template)
        job["job_id"] = job_id
        job["account"] = LONGEST
        extra.append(job)
    answer["jobs"] = [*answer["jobs"], *extra]
    return answer


def _sshare() -> str:
    """``sshare -P`` rows: root, 300 generated accounts, and two with broken names."""
    rows = ["root||1.000000|1.000000|0.500000"]
    rows += [f"  acct{i:04d}||0.003000|{i / 1000:.6f}|0.500000" for i in range(300)]
    rows += [f"  {ANSI}||0.001000|0.900000|0.100000", f"  {TOO_LONG}||0.001000|0.8|0.1"]
    return "\n".join(rows) + "\n"


def _sprio(squeue: dict[str, Any]) -> str:
    """One ``sprio`` row per pending job, in partition ``gpu``."""
    pending = [job["job_id"] for job in squeue["jobs"] if job["job_state"] == "PENDING"]
    return "".join(f"{job}|gpu|{job % 7}|0|0|2|1000|0|cpu=1,mem=1\n" for job in pending)


def _stand_in(bin_dir: Path, name: str, body: str) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """Stand-in Slurm commands printing the recorded cluster with hostile accounts."""
    squeue = _squeue()
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "squeue.json").write_text(json.dumps(squeue))
    (outputs / "sshare.txt").write_text(_sshare())
    (outputs / "sprio.txt").write_text(_sprio(squeue))
    (outputs / "config.txt").write_text(CONFIG)
    directory = tmp_path / "bin"
    directory.mkdir()
    _stand_in(directory, "sinfo", f"cat {SAMPLES / 'sinfo.json'}")
    _stand_in(directory, "squeue", f"cat {outputs / 'squeue.json'}")
    _stand_in(directory, "sshare", f"cat {outputs / 'sshare.txt'}")
    _stand_in(directory, "sprio", f"cat {outputs / 'sprio.txt'}")
    _stand_in(
        directory,
        "scontrol",
        f'if [ "$1" = show ] && [ "$2" = config ]; then cat {outputs / "config.txt"}; '
        f"else cat {SAMPLES / 'scontrol-show-job-d.txt'}; fi",
    )
    return directory


def scrape(bin_dir: Path, max_accounts: int) -> str:
    """One scrape of the exporter's collector over the stand-in commands."""
    commands = SlurmCommands(bin_dir=bin_dir)
    collector = QueueCollector(
        CommandReader(commands, clock=lambda: NOW), commands, max_accounts=max_accounts
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def parse(text: str) -> Samples:
    """Every sample of an exposition, keyed by name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def accounts_of(samples: Samples, family: str) -> set[str]:
    """The account labels of ``family``'s series."""
    return {dict(labels)["account"] for name, labels in samples if name == family}


def totals(samples: Samples, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``family`` summed over accounts, by its other labels."""
    summed: dict[tuple[tuple[str, str], ...], float] = defaultdict(float)
    for (name, labels), value in samples.items():
        if name == family:
            summed[tuple(sorted((k, v) for k, v in labels if k != "account"))] += value
    return dict(summed)


def test_a_thousand_hostile_accounts_give_bounded_valid_series(bin_dir: Path) -> None:
    text = scrape(bin_dir, LIMIT)
    assert not CONTROL.search(text)
    assert "toposcope_fake" not in {f.name for f in text_string_to_metric_families(text)}
    samples = parse(text)
    for collector in ("slurm_queue", "slurm_fairshare", "slurm_priority"):
        key = ("toposcope_scrape_collector_success", frozenset({("collector", collector)}))
        assert samples[key] == 1, collector
    for family in ACCOUNT_FAMILIES:
        accounts = accounts_of(samples, family)
        assert len(accounts) == LIMIT + 1, family
        assert OTHER_ACCOUNT in accounts and INVALID_LABEL_VALUE in accounts
        assert LONGEST in accounts
        assert all(a in BUCKETS or label_value(a) == a for a in accounts), family
    # 1,000 generated, the longest valid name, (invalid) for 5 broken names, (none): 1,003
    where = frozenset({("scheduler", "slurm"), ("partition", "gpu")})
    assert samples[("toposcope_queue_accounts_folded", where)] == MANY + 3 - LIMIT
    # sshare's ratios: 301 valid accounts and 2 broken ones, of which LIMIT are published
    ratio = accounts_of(samples, "toposcope_queue_account_usage_ratio")
    assert len(ratio) == LIMIT and all(label_value(a) == a for a in ratio)
    assert "root" in ratio and "acct0299" in ratio and "acct0001" not in ratio
    left_out = ("toposcope_queue_accounting_accounts_left_out", frozenset({("scheduler", "slurm")}))
    assert samples[left_out] == 303 - LIMIT


def test_folding_keeps_every_familys_total(bin_dir: Path) -> None:
    folded = parse(scrape(bin_dir, LIMIT))
    whole = parse(scrape(bin_dir, 10_000))
    where = frozenset({("scheduler", "slurm"), ("partition", "gpu")})
    assert whole[("toposcope_queue_accounts_folded", where)] == 0
    assert len(accounts_of(whole, "toposcope_queue_account_pending_gpus")) == MANY + 3
    for family in ACCOUNT_FAMILIES:
        assert totals(folded, family) == pytest.approx(totals(whole, family)), family
    # and the accounts' pending GPUs add up to the partition's, counted without accounts
    pending = sum(v for (n, _), v in whole.items() if n == "toposcope_queue_pending_gpus")
    (by_accounts,) = totals(folded, "toposcope_queue_account_pending_gpus").values()
    # jobs 4, 7, 8 and the generated ones ask for 2 nodes each; job 5 one GPU, job 6 three
    per_node = 4 + 4 + 4 + sum(1 + i % 4 for i in range(MANY))
    assert by_accounts == pending == 2 * per_node + 1 + 3
    # the oldest waits are maxima: folding keeps the partition's oldest
    family = "toposcope_queue_account_oldest_wait_seconds"
    oldest = [v for (n, _), v in folded.items() if n == family]
    assert max(oldest) == max(v for (n, _), v in whole.items() if n == family)
    assert len(oldest) <= LIMIT + 1


def test_scrape_passes_promtool(bin_dir: Path) -> None:
    promtool = require_binary("promtool")
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=scrape(bin_dir, LIMIT),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cli_flag_sets_the_limit_and_refuses_nonsense(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for name in ("SLURM_CONF", "TOPOSCOPE_SLURM_URL", "TOPOSCOPE_SLURM_TOKEN_FILE", "SLURM_JWT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["slurm", "exporter", "--slurm-max-accounts", "5", "--print"]) == 0
    samples = parse(capsys.readouterr().out)
    assert len(accounts_of(samples, "toposcope_queue_account_jobs")) == 6
    assert main(["slurm", "exporter", "--slurm-max-accounts", "0", "--print"]) == 2
    assert "--slurm-max-accounts 0 is not between 1 and" in capsys.readouterr().err


def test_ranking_merges_broken_names_and_breaks_ties_by_label() -> None:
    labels = account_labels(
        {"b": (2, 1, 0), "a": (2, 1, 0), ANSI: (1, 1, 0), TOO_LONG: (2, 1, 0), "": (0, 1, 0)},
        2,
    )
    # (invalid) holds 3 GPUs in all and ranks first; "a" beats "b" on the tie
    assert labels.labels == {
        "a": "a",
        "b": OTHER_ACCOUNT,
        ANSI: INVALID_LABEL_VALUE,
        TOO_LONG: INVALID_LABEL_VALUE,
        "": OTHER_ACCOUNT,
    }
    assert labels.folded == 2 and labels.label("never seen") == OTHER_ACCOUNT
    with pytest.raises(ValueError, match="at least 1"):
        account_labels({}, 0)
