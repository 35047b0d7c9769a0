"""Removing the simulator's state directory: in time, completely, never beyond its links."""

from __future__ import annotations

from pathlib import Path

from tests.procs import poll
from toposcope.sim.paths import remove_tree


def make_tree(root: Path, nodes: int, files: int) -> None:
    """A state directory shaped like the simulator's: ``nodes/<name>/...`` and a template."""
    for n in range(nodes):
        base = root / "nodes" / f"n{n:03d}" / "proc" / "1000"
        base.mkdir(parents=True)
        for f in range(files):
            (base / f"f{f}").write_text("x")
    (root / "templates" / "t" / "cpu").mkdir(parents=True)
    (root / "targets.json").write_text("[]")


def test_small_tree_is_removed_in_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_tree(state, nodes=5, files=10)
    assert remove_tree(state, seconds=10.0) is True
    assert not state.exists()


def test_missing_tree_counts_as_removed(tmp_path: Path) -> None:
    assert remove_tree(tmp_path / "never-made", seconds=1.0) is True


def test_tree_left_after_the_budget_is_finished_by_a_detached_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_tree(state, nodes=20, files=20)
    assert remove_tree(state, seconds=0.0) is False
    poll(lambda: not state.exists(), deadline_s=30.0)


def test_links_inside_the_tree_are_removed_not_followed(tmp_path: Path) -> None:
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "keep").write_text("precious")
    state = tmp_path / "state"
    make_tree(state, nodes=1, files=1)
    (state / "nodes" / "link").symlink_to(decoy)
    (state / "nodes" / "n000" / "fd").mkdir()
    (state / "nodes" / "n000" / "fd" / "3").symlink_to(decoy)
    assert remove_tree(state, seconds=10.0) is True
    assert not state.exists()
    assert (decoy / "keep").read_text() == "precious"
