"""``toposcope fabric show``: the text, the JSON shape, and exit 2 with file:line on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REPO, holds_any, modules_loaded_by
from toposcope.cli import main

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


def test_show_prints_the_tree_leaves_blocks_and_rails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric", "show", "--file", str(FIXTURES / "fabric.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fabric: 3 switches on 2 levels (leaf, spine), 4 nodes, 1 blocks\n")
    assert (
        "  spine1 (spine)\n    rail0-leaf (leaf): 4 nodes gpu[01-04], oversubscription 2.00:1"
        in out
    )
    assert "blocks (block sizes: 4):\n  nvl-1: 4 nodes gpu[01-04]" in out
    assert "rails (rail-optimised" in out and "  mlx5_1: 1 leaves rail1-leaf" in out


def test_show_of_a_fat_tree_names_the_leaves_shown_under_an_earlier_spine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dump = str(FIXTURES / "ibnetdiscover-topograph.out")
    assert main(["fabric", "show", "--ibnetdiscover", dump]) == 0
    out = capsys.readouterr().out
    assert "  A10-P1-IBSPINE-02 (spine)\n    and 28 shown above: A09-P1-IBLEAF-01-[01,03-04]" in out
    assert "  A09-P1-IBLEAF-04-04      17         6400  1.12:1" in out


def test_show_json_has_switches_blocks_and_nodes_with_ports(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["fabric", "show", "--format", "json", "--file", str(FIXTURES / "fabric.yaml")]) == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"switches", "blocks", "block_sizes", "nodes"}
    spine, leaf = document["switches"][0], document["switches"][1]
    assert (spine["name"], spine["level"], spine["switches"]) == (
        "spine1",
        1,
        ["rail0-leaf", "rail1-leaf"],
    )
    assert leaf["nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert leaf["oversubscription"] == 2.0
    assert document["blocks"] == [
        {"name": "nvl-1", "nodes": ["gpu01", "gpu02", "gpu03", "gpu04"], "block_sizes": [4]}
    ]
    assert document["nodes"][0] == {
        "name": "gpu01",
        "ports": [
            {"nic": "mlx5_0", "switch": "rail0-leaf", "gbps": 400},
            {"nic": "mlx5_1", "switch": "rail1-leaf", "gbps": 400},
        ],
    }


@pytest.mark.parametrize(
    ("option", "text", "message"),
    [
        ("--slurm-topology", "SwitchName=a Nodes=n1\nSwitchName=a\n", ":2: switch a is declared"),
        ("--ibnetdiscover", "Hello\n", ":1: not an ibnetdiscover line"),
        ("--file", "switches: 3\n", ":1: switches: must be a list"),
    ],
)
def test_bad_input_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, text: str, message: str
) -> None:
    path = tmp_path / "input"
    path.write_text(text)
    assert main(["fabric", "show", option, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"toposcope fabric: error: {path}{message}"), err
    assert "Traceback" not in err


def test_a_missing_file_or_source_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fabric", "show", "--file", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert main(["fabric", "show"]) == 2
    assert "name the fabric: --slurm-topology FILE" in capsys.readouterr().err
    assert main(["fabric"]) == 2
    assert "choose an action" in capsys.readouterr().err


def test_two_sources_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["fabric", "show", "--file", "a", "--ibnetdiscover", "b"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_show_imports_only_the_reader_it_needs() -> None:
    conf = str(FIXTURES / "slurm-tree.conf")
    loaded = modules_loaded_by(["fabric", "show", "--slurm-topology", conf])
    assert "toposcope.fabric.slurmconf" in loaded
    for absent in ("yaml", "toposcope.fabric.ibnetdiscover", "toposcope.fabric.yamlfile"):
        assert not holds_any(loaded, absent), absent
    for part in ("toposcope.advisor", "toposcope.slurm", "toposcope.kube", "toposcope.sim"):
        assert not holds_any(loaded, part), part
