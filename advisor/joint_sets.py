"""A joint choice of GPU sets for jobs that want the same GPUs.

A policy that lets jobs choose one after another hands a machine's few well-linked GPUs
to whoever chooses first. When several jobs want the same GPUs, the sets they end up on
should instead be the combination worth most in total: a job that has a good second
choice can leave the contested set to one that has none, or to one that gains much more
from it.

Each :class:`Claimant` offers :class:`Option` s, each a set of claims (GPUs, as
``gpu:NODE/INDEX``) and the value of taking them; a claimant takes at most one option, no
two chosen options share a claim, and :func:`assign` returns the combination whose values
sum highest (ties: the first found, the claimants' best options first). Claimants whose
options share no claim with any other's are decided alone (their best option), so only
the contested groups are searched: exhaustively by branch and bound (a branch stops when
what it has plus the best each remaining claimant could add is no more than the best
found), within ``budget`` branches per group, after which the best found so far stands
(the first one tried is each claimant's best option in turn, a first-come choice in the
order of value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: branches searched per contested group before the best found so far stands
DEFAULT_BUDGET = 20000


@dataclass(frozen=True)
class Option(Generic[T]):
    """One choice of a claimant: the ``claims`` it takes, its ``value`` and what it is
    (``choice``, the caller's own object, for example a GPU set).
    """

    claims: frozenset[str]
    value: float
    choice: T


@dataclass(frozen=True)
class Claimant(Generic[T]):
    """Who chooses (``key``) and its options; options of value 0 or less are never taken
    (taking nothing is worth 0).
    """

    key: str
    options: tuple[Option[T], ...]

    def best(self) -> float:
        """The most any of its options is worth (0: none pays)."""
        return max((o.value for o in self.options if o.value > 0), default=0.0)


def _groups(claimants: Sequence[Claimant[T]]) -> list[list[Claimant[T]]]:
    """Claimants joined when their options share a claim (transitively), in input order."""
    parent = list(range(len(claimants)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, claimant in enumerate(claimants):
        for option in claimant.options:
            for claim in option.claims:
                j = owner.setdefault(claim, i)
                parent[root(i)] = root(j)
    found: dict[int, list[Claimant[T]]] = {}
    for i, claimant in enumerate(claimants):
        found.setdefault(root(i), []).append(claimant)
    return list(found.values())


class _Search(Generic[T]):
    """Branch and bound over one contested group (see the module docstring)."""

    def __init__(self, group: Sequence[Claimant[T]], budget: int) -> None:
        self.group = sorted(group, key=lambda c: -c.best())
        self.options = [
            sorted((o for o in c.options if o.value > 0), key=lambda o: -o.value)
            for c in self.group
        ]
        self.rest = [0.0] * (len(self.group) + 1)
        for i in range(len(self.group) - 1, -1, -1):
            self.rest[i] = self.rest[i + 1] + self.group[i].best()
        self.budget = budget
        self.best_value = -1.0
        self.best_pick: list[Option[T] | None] = []

    def run(self) -> dict[str, Option[T] | None]:
        self._walk(0, 0.0, set(), [])
        return {c.key: pick for c, pick in zip(self.group, self.best_pick, strict=True)}

    def _walk(self, i: int, value: float, taken: set[str], picks: list[Option[T] | None]) -> None:
        if i == len(self.group):
            if value > self.best_value:
                self.best_value, self.best_pick = value, list(picks)
            return
        if self.budget <= 0 and self.best_value >= 0:
            return  # out of budget: the best found so far stands
        if value + self.rest[i] <= self.best_value:
            return
        self.budget -= 1
        for option in self.options[i]:
            if taken.isdisjoint(option.claims):
                picks.append(option)
                self._walk(i + 1, value + option.value, taken | option.claims, picks)
                picks.pop()
        picks.append(None)
        self._walk(i + 1, value, taken, picks)
        picks.pop()


def assign(
    claimants: Sequence[Claimant[T]], budget: int = DEFAULT_BUDGET
) -> dict[str, Option[T] | None]:
    """The option each claimant takes (``None``: none) so that the chosen options share no
    claim and their values sum highest (module docstring); every claimant's key is in the
    answer.
    """
    keys = [c.key for c in claimants]
    if len(set(keys)) != len(keys):
        raise ValueError("claimants must have distinct keys")
    chosen: dict[str, Option[T] | None] = {}
    for group in _groups(claimants):
        chosen.update(_Search(group, budget).run())
    return chosen
