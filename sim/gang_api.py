"""The simulator's resource-manager API with its one extension: ``POST /api/v1/gang-moves``.

The contract's routes (:mod:`toposcope.rm.api`) move one workload per action; a multi-node
job is moved whole by the simulator's own route, which takes a
:class:`~toposcope.sim.gang_moves.GangMove` (request id, the job, one node per part) and
answers the one :class:`~toposcope.rm.models.ActionState` of the move (202, 200 for a
repeat), under the same bearer token as every state change. The same route takes a
:class:`~toposcope.sim.gang_swaps.JointMove` (request id, several jobs, each part's node and
GPUs), which moves several gangs, and the single-node jobs that make room, at once.
``GET /actions/{id}`` then finds the move by its id or request id like any other action.
The advisor's ``sim`` backend sends it for a ``fabric-placement`` move of a running job
(:meth:`toposcope.advisor.rmclients.http.HttpResourceManager.plan_fabric`).
"""

from __future__ import annotations

import urllib.parse

from apiflask import APIFlask
from pydantic import RootModel

from toposcope.auth.bearer import BearerAuth
from toposcope.rm import ActionState
from toposcope.rm.api import DEFAULT_PREFIX, NO_TOKEN_MESSAGE, ActionStateBody, make_api_app
from toposcope.sim.cluster import SimCluster
from toposcope.sim.gang_moves import GangMove, move_gang
from toposcope.sim.gang_swaps import JointMove, move_jobs

#: the route, under the API's prefix
GANG_MOVES = "/gang-moves"


class GangMoveBody(RootModel[GangMove | JointMove]):
    """A whole-gang move or a joint move of several jobs, as the route reads it."""


def make_sim_api_app(cluster: SimCluster, token: str | None) -> APIFlask:
    """The resource-manager API over ``cluster`` plus ``POST /api/v1/gang-moves``."""
    app = make_api_app(cluster, token)
    guard = BearerAuth(token, realm="toposcope", no_token_message=NO_TOKEN_MESSAGE)

    @app.post(f"{DEFAULT_PREFIX}{GANG_MOVES}")
    @app.output(ActionStateBody, status_code=202, description="Accepted: the move")
    @app.doc(operation_id="moveGang")
    @guard.required
    @app.input(GangMoveBody, arg_name="body")
    def gang_move(body: GangMoveBody) -> tuple[ActionState, int, dict[str, str]]:
        """Move every part of a multi-node job at once (:mod:`toposcope.sim.gang_moves`), or
        several jobs at once (:mod:`toposcope.sim.gang_swaps`).
        """
        known = _known(cluster, body.root.request_id)
        move = body.root
        state = (
            move_jobs(cluster, move) if isinstance(move, JointMove) else move_gang(cluster, move)
        )
        location = {"Location": f"{DEFAULT_PREFIX}/actions/{urllib.parse.quote(state.id, safe='')}"}
        return state, 200 if known else 202, location

    return app


def _known(cluster: SimCluster, request_id: str) -> bool:
    """Whether ``request_id`` was already used (the answer is then 200, not 202)."""
    return any(s.request.request_id == request_id for s in cluster.recorded())


__all__ = ["GANG_MOVES", "GangMoveBody", "make_sim_api_app"]
