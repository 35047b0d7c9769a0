"""The drawing of one node's topology: sockets, NUMA nodes, GPUs, NICs and GPU-GPU links."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import plotly.graph_objects as go

from toposcope.dashboards.app.charts import GIB, TEMPLATE, empty_figure
from toposcope.dashboards.app.node_data import GpuView, LinkView, NicView, NodeTopology, NumaView
from toposcope.topology.model import LinkType

#: colour of a GPU-GPU link by its class (best links green, cross-socket red)
LINK_COLOURS: dict[LinkType, str] = {
    LinkType.NVLINK: "#2ca02c",
    LinkType.PIX: "#1f77b4",
    LinkType.PXB: "#17becf",
    LinkType.PHB: "#ff7f0e",
    LinkType.NODE: "#bcbd22",
    LinkType.SYS: "#d62728",
}
LINK_NAMES: dict[LinkType, str] = {
    LinkType.NVLINK: "NVLink",
    LinkType.PIX: "PIX (one PCIe switch)",
    LinkType.PXB: "PXB (several switches)",
    LinkType.PHB: "PHB (host bridge)",
    LinkType.NODE: "NODE (same socket)",
    LinkType.SYS: "SYS (across sockets)",
}

_GPU_W, _GPU_H, _GAP = 1.0, 0.8, 0.25
_NUMA_PAD = 0.3
#: heights: the top of the sockets, the bottom of the NUMA boxes, the top of the devices
_TOP, _NUMA_BOTTOM = 4.0, 1.6
_GPU_TOP = _NUMA_BOTTOM - 0.3

#: one plotly shape or annotation, as a dict of its properties
Shape = dict[str, object]


@dataclass
class _Canvas:
    """What the layers draw into, in drawing order: shapes, text, invisible hover points,
    and where each GPU's centre went (links and the GPU layer read it)."""

    shapes: list[Shape] = field(default_factory=list)
    annotations: list[Shape] = field(default_factory=list)
    hover_x: list[float] = field(default_factory=list)
    hover_y: list[float] = field(default_factory=list)
    hover_text: list[str] = field(default_factory=list)
    gpu_pos: dict[int, tuple[float, float]] = field(default_factory=dict)

    def hover(self, x: float, y: float, text: str) -> None:
        """Show ``text`` when the pointer is over (``x``, ``y``)."""
        self.hover_x.append(x)
        self.hover_y.append(y)
        self.hover_text.append(text)


def _gpu_colour(gpu: GpuView) -> str:
    if not gpu.up:
        return "#7f7f7f"
    util = gpu.utilization or 0.0
    # white (idle) to a dark blue (busy)
    shade = int(235 - 185 * min(max(util, 0.0), 1.0))
    return f"rgb({shade},{shade + 10 if shade < 245 else 245},255)"


def _gpu_text(gpu: GpuView) -> str:
    if not gpu.up:
        return f"GPU {gpu.index}<br>lost"
    util = f"{gpu.utilization:.0%}" if gpu.utilization is not None else "-"
    return f"GPU {gpu.index}<br>{util}"


def _gpu_hover(gpu: GpuView) -> str:
    parts = [f"GPU {gpu.index} {gpu.model}".strip(), f"NUMA node {gpu.numa_node}"]
    if gpu.utilization is not None:
        parts.append(f"utilization {gpu.utilization:.0%}")
    if gpu.memory_used is not None and gpu.memory_total:
        parts.append(f"memory {gpu.memory_used / GIB:.1f} / {gpu.memory_total / GIB:.0f} GiB")
    if gpu.power is not None:
        parts.append(f"power {gpu.power:.0f} W")
    parts.append("held by " + ", ".join(gpu.holders) if gpu.holders else "free")
    if not gpu.up:
        parts.append("LOST (toposcope_gpu_up 0)")
    return "<br>".join(parts)


def topology_figure(
    topo: NodeTopology, highlight: Iterable[int] = (), title: str = ""
) -> go.Figure:
    """Draw ``topo``: sockets, NUMA nodes with CPUs and memory, GPUs and NICs below their
    NUMA node, and GPU-GPU links as arcs coloured by class. ``highlight`` GPUs get a thick
    outline (a what-if placement).

    Shapes are named ``package-N``, ``numa-N``, ``gpu-N``, ``nic-N`` and ``link-A-B`` so that
    tests can count what is drawn.
    """
    title = title or f"{topo.name}: topology"
    if not topo.numa and not topo.gpus:
        return empty_figure(
            f"no topology series for {topo.name} (toposcope_numa_node_info, toposcope_gpu_info)",
            title,
        )
    canvas = _Canvas()
    width = _draw_sockets(canvas, topo)
    width = _place_orphan_gpus(canvas, topo, width)
    chosen = set(highlight)
    for gpu in topo.gpus:
        _draw_gpu(canvas, gpu, gpu.index in chosen)
    bottom, used_kinds = _draw_links(canvas, topo.links)
    traces = [*_link_legend(used_kinds), _hover_trace(canvas)]
    figure = go.Figure(traces)
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        shapes=canvas.shapes,
        annotations=canvas.annotations,
        xaxis={"visible": False, "range": [-0.2, width + 0.2]},
        yaxis={"visible": False, "range": [bottom - 0.2, _TOP + 0.2]},
        height=460,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.02, "title": {"text": "GPU links: "}},
        uirevision=topo.name,
    )
    return figure


def _draw_sockets(canvas: _Canvas, topo: NodeTopology) -> float:
    """Draw each socket with its NUMA nodes left to right (one unnamed socket holding every
    NUMA node when no package is known); returns the x where the next thing goes."""
    x = 0.0
    packages: list[int | None] = [*topo.packages] or [None]
    for package in packages:
        members = [n for n in topo.numa if n.package == package or package is None]
        if package is not None and not members:
            continue
        package_x0 = x
        for numa in members:
            gpus = [g for g in topo.gpus if g.numa_node == numa.id]
            nics = [n for n in topo.nics if n.numa_node == numa.id]
            x = _draw_numa(canvas, numa, x, gpus, nics)
        if package is not None:
            _draw_package(canvas, package, package_x0, x)
        x += 0.6
    return x


def _draw_package(canvas: _Canvas, package: int, x0: float, x1: float) -> None:
    """A dotted box around the NUMA nodes of socket ``package`` (from ``x0`` to ``x1``)."""
    canvas.shapes.append(
        {
            "type": "rect",
            "name": f"package-{package}",
            "x0": x0 + 0.1,
            "x1": x1 + 0.2,
            "y0": _NUMA_BOTTOM - 0.1 - 1.4,
            "y1": _TOP,
            "line": {"color": "#555", "width": 1, "dash": "dot"},
            "layer": "below",
        }
    )
    canvas.annotations.append(
        {
            "x": x0 + 0.2,
            "y": _TOP - 0.2,
            "xanchor": "left",
            "text": f"socket {package}",
            "showarrow": False,
            "font": {"size": 12, "color": "#555"},
        }
    )


def _draw_numa(
    canvas: _Canvas, numa: NumaView, x: float, gpus: Sequence[GpuView], nics: Sequence[NicView]
) -> float:
    """Draw NUMA node ``numa`` right of ``x`` with its memory bar and label, place its GPUs
    and draw its NICs below it; returns its right edge."""
    devices = max(len(gpus) + len(nics), 2)
    width = devices * (_GPU_W + _GAP) - _GAP + 2 * _NUMA_PAD
    x0, x1 = x + 0.3, x + 0.3 + width
    canvas.shapes.append(
        {
            "type": "rect",
            "name": f"numa-{numa.id}",
            "x0": x0,
            "x1": x1,
            "y0": _NUMA_BOTTOM,
            "y1": _TOP - 0.5,
            "line": {"color": "#4c72b0", "width": 2},
            "fillcolor": "rgba(76,114,176,0.08)",
            "layer": "below",
        }
    )
    memory = _draw_numa_memory(canvas, numa, x0, x1)
    busy = f"{numa.cpu_busy:.0%}" if numa.cpu_busy is not None else "-"
    canvas.annotations.append(
        {
            "x": (x0 + x1) / 2,
            "y": _TOP - 0.85,
            "text": f"<b>NUMA {numa.id}</b><br>{numa.cpu_count} CPUs "
            f"({numa.cpus or 'memory only'})<br>CPU busy {busy}<br>memory {memory}",
            "showarrow": False,
            "font": {"size": 11},
        }
    )
    canvas.hover(
        (x0 + x1) / 2,
        _NUMA_BOTTOM + 0.9,
        f"NUMA node {numa.id} (package {numa.package})<br>CPUs {numa.cpus}"
        f"<br>CPU busy {busy}<br>memory {memory}",
    )
    device_x = x0 + _NUMA_PAD
    for gpu in gpus:
        canvas.gpu_pos[gpu.index] = (device_x + _GPU_W / 2, _GPU_TOP - _GPU_H / 2)
        device_x += _GPU_W + _GAP
    for nic in nics:
        _draw_nic(canvas, nic.bus_id, device_x)
        device_x += _GPU_W + _GAP
    return x1


def _draw_numa_memory(canvas: _Canvas, numa: NumaView, x0: float, x1: float) -> str:
    """Draw the bar of ``numa``'s memory in use (when its size is known) inside the box from
    ``x0`` to ``x1``; returns the memory as text ("used/total GiB", "-" when unknown)."""
    if not numa.memory_total:
        return "-"
    used = numa.memory_used or 0.0
    share = min(max(used / numa.memory_total, 0.0), 1.0)
    canvas.shapes.append(
        {
            "type": "rect",
            "name": f"numa-{numa.id}-memory",
            "x0": x0 + 0.15,
            "x1": x0 + 0.15 + (x1 - x0 - 0.3) * share,
            "y0": _NUMA_BOTTOM + 0.15,
            "y1": _NUMA_BOTTOM + 0.4,
            "line": {"width": 0},
            "fillcolor": "rgba(76,114,176,0.55)",
        }
    )
    return f"{used / GIB:.0f}/{numa.memory_total / GIB:.0f} GiB"


def _place_orphan_gpus(canvas: _Canvas, topo: NodeTopology, x: float) -> float:
    """Place the GPUs of no drawn NUMA node in a row right of ``x``, with a label; returns
    the x after them."""
    numa_ids = [n.id for n in topo.numa]
    orphans = [g for g in topo.gpus if g.numa_node not in numa_ids]
    if not orphans:
        return x
    for gpu in orphans:
        canvas.gpu_pos[gpu.index] = (x + _GPU_W / 2, _GPU_TOP - _GPU_H / 2)
        x += _GPU_W + _GAP
    canvas.annotations.append(
        {"x": x, "y": _GPU_TOP + 0.2, "text": "GPUs without NUMA node", "showarrow": False}
    )
    return x


def _draw_gpu(canvas: _Canvas, gpu: GpuView, picked: bool) -> None:
    """Draw ``gpu`` at its placed centre, shaded by utilization, outlined thick when ``picked``."""
    cx, cy = canvas.gpu_pos[gpu.index]
    canvas.shapes.append(
        {
            "type": "rect",
            "name": f"gpu-{gpu.index}",
            "x0": cx - _GPU_W / 2,
            "x1": cx + _GPU_W / 2,
            "y0": cy - _GPU_H / 2,
            "y1": cy + _GPU_H / 2,
            "line": {"color": "#e377c2" if picked else "#333", "width": 5 if picked else 1},
            "fillcolor": _gpu_colour(gpu),
        }
    )
    util = gpu.utilization or 0.0
    canvas.annotations.append(
        {
            "x": cx,
            "y": cy,
            "text": _gpu_text(gpu),
            "showarrow": False,
            "font": {"size": 10, "color": "white" if gpu.up and util > 0.5 else "black"},
        }
    )
    canvas.hover(cx, cy, _gpu_hover(gpu))


def _draw_links(canvas: _Canvas, links: Iterable[LinkView]) -> tuple[float, set[LinkType]]:
    """Draw each link between two placed GPUs as an arc below them, coloured by class;
    returns the lowest y drawn and the link classes used."""
    bottom = _GPU_TOP - _GPU_H
    used_kinds: set[LinkType] = set()
    for link in links:
        if link.a not in canvas.gpu_pos or link.b not in canvas.gpu_pos:
            continue
        (ax, ay), (bx, by) = canvas.gpu_pos[link.a], canvas.gpu_pos[link.b]
        dip = 0.25 + 0.12 * abs(bx - ax)
        y0 = ay - _GPU_H / 2
        path = f"M {ax},{y0} Q {(ax + bx) / 2},{y0 - dip} {bx},{by - _GPU_H / 2}"
        bottom = min(bottom, y0 - dip / 2 - 0.2)
        canvas.shapes.append(
            {
                "type": "path",
                "name": f"link-{link.a}-{link.b}",
                "path": path,
                "line": {"color": LINK_COLOURS[link.kind], "width": 1.5},
                "opacity": 0.8,
            }
        )
        used_kinds.add(link.kind)
    return bottom, used_kinds


def _link_legend(used_kinds: set[LinkType]) -> list[go.Scatter]:
    """One legend entry (an empty line trace) per link class drawn, best class first."""
    return [
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            line={"color": LINK_COLOURS[kind], "width": 3},
            name=LINK_NAMES[kind],
            hoverinfo="skip",
        )
        for kind in LinkType
        if kind in used_kinds
    ]


def _hover_trace(canvas: _Canvas) -> go.Scatter:
    """Invisible markers at the hover points that show each one's details."""
    return go.Scatter(
        x=canvas.hover_x,
        y=canvas.hover_y,
        mode="markers",
        marker={"size": 28, "opacity": 0},
        hovertext=canvas.hover_text,
        hoverinfo="text",
        showlegend=False,
        name="details",
    )


def _draw_nic(canvas: _Canvas, bus_id: str, x: float) -> None:
    """Draw the NIC ``bus_id`` as a small box at ``x`` in the device row."""
    canvas.shapes.append(
        {
            "type": "rect",
            "name": f"nic-{bus_id}",
            "x0": x,
            "x1": x + _GPU_W,
            "y0": _GPU_TOP - _GPU_H * 0.6,
            "y1": _GPU_TOP,
            "line": {"color": "#8c564b", "width": 1},
            "fillcolor": "#f2e2d9",
        }
    )
    canvas.hover(x + _GPU_W / 2, _GPU_TOP - _GPU_H * 0.3, f"NIC {bus_id}")
    canvas.annotations.append(
        {
            "x": x + _GPU_W / 2,
            "y": _GPU_TOP - _GPU_H * 0.3,
            "text": "NIC",
            "showarrow": False,
            "font": {"size": 9, "color": "#8c564b"},
        }
    )
