"""The drawing of one node's topology: sockets, NUMA nodes, GPUs, NICs and GPU-GPU links."""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go

from toposcope.dashboards.app.charts import GIB, TEMPLATE, empty_figure
from toposcope.dashboards.app.node_data import GpuView, NodeTopology
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
    chosen = set(highlight)
    shapes: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    hover_x: list[float] = []
    hover_y: list[float] = []
    hover_text: list[str] = []
    hover = (hover_x, hover_y, hover_text)
    gpu_pos: dict[int, tuple[float, float]] = {}

    by_numa: dict[int | None, list[GpuView]] = {}
    for gpu in topo.gpus:
        by_numa.setdefault(gpu.numa_node, []).append(gpu)
    nics_by_numa: dict[int | None, int] = {}
    for nic in topo.nics:
        nics_by_numa[nic.numa_node] = nics_by_numa.get(nic.numa_node, 0) + 1
    numa_ids = [n.id for n in topo.numa]
    orphans = [g for g in topo.gpus if g.numa_node not in numa_ids]

    def numa_width(numa: int | None, count: int) -> float:
        devices = max(count + nics_by_numa.get(numa, 0), 2)
        return devices * (_GPU_W + _GAP) - _GAP + 2 * _NUMA_PAD

    x = 0.0
    top, numa_bottom = 4.0, 1.6
    gpu_top = numa_bottom - 0.3
    packages: list[int | None] = [*topo.packages] or [None]
    for package in packages:
        members = [n for n in topo.numa if n.package == package or package is None]
        if package is not None and not members:
            continue
        package_x0 = x
        for numa in members:
            gpus = by_numa.get(numa.id, [])
            width = numa_width(numa.id, len(gpus))
            x0, x1 = x + 0.3, x + 0.3 + width
            shapes.append(
                {
                    "type": "rect",
                    "name": f"numa-{numa.id}",
                    "x0": x0,
                    "x1": x1,
                    "y0": numa_bottom,
                    "y1": top - 0.5,
                    "line": {"color": "#4c72b0", "width": 2},
                    "fillcolor": "rgba(76,114,176,0.08)",
                    "layer": "below",
                }
            )
            memory = "-"
            if numa.memory_total:
                used = numa.memory_used or 0.0
                memory = f"{used / GIB:.0f}/{numa.memory_total / GIB:.0f} GiB"
                share = min(max(used / numa.memory_total, 0.0), 1.0)
                shapes.append(
                    {
                        "type": "rect",
                        "name": f"numa-{numa.id}-memory",
                        "x0": x0 + 0.15,
                        "x1": x0 + 0.15 + (x1 - x0 - 0.3) * share,
                        "y0": numa_bottom + 0.15,
                        "y1": numa_bottom + 0.4,
                        "line": {"width": 0},
                        "fillcolor": "rgba(76,114,176,0.55)",
                    }
                )
            busy = f"{numa.cpu_busy:.0%}" if numa.cpu_busy is not None else "-"
            annotations.append(
                {
                    "x": (x0 + x1) / 2,
                    "y": top - 0.85,
                    "text": f"<b>NUMA {numa.id}</b><br>{numa.cpu_count} CPUs "
                    f"({numa.cpus or 'memory only'})<br>CPU busy {busy}<br>memory {memory}",
                    "showarrow": False,
                    "font": {"size": 11},
                }
            )
            hover_x.append((x0 + x1) / 2)
            hover_y.append(numa_bottom + 0.9)
            hover_text.append(
                f"NUMA node {numa.id} (package {numa.package})<br>CPUs {numa.cpus}"
                f"<br>CPU busy {busy}<br>memory {memory}"
            )
            device_x = x0 + _NUMA_PAD
            for gpu in gpus:
                gpu_pos[gpu.index] = (device_x + _GPU_W / 2, gpu_top - _GPU_H / 2)
                device_x += _GPU_W + _GAP
            for nic in (n for n in topo.nics if n.numa_node == numa.id):
                _nic_shape(shapes, annotations, hover, nic.bus_id, device_x, gpu_top)
                device_x += _GPU_W + _GAP
            x = x1
        if package is not None:
            shapes.append(
                {
                    "type": "rect",
                    "name": f"package-{package}",
                    "x0": package_x0 + 0.1,
                    "x1": x + 0.2,
                    "y0": numa_bottom - 0.1 - 1.4,
                    "y1": top,
                    "line": {"color": "#555", "width": 1, "dash": "dot"},
                    "layer": "below",
                }
            )
            annotations.append(
                {
                    "x": package_x0 + 0.2,
                    "y": top - 0.2,
                    "xanchor": "left",
                    "text": f"socket {package}",
                    "showarrow": False,
                    "font": {"size": 12, "color": "#555"},
                }
            )
        x += 0.6
    if orphans:
        for gpu in orphans:
            gpu_pos[gpu.index] = (x + _GPU_W / 2, gpu_top - _GPU_H / 2)
            x += _GPU_W + _GAP
        annotations.append(
            {"x": x, "y": gpu_top + 0.2, "text": "GPUs without NUMA node", "showarrow": False}
        )
    for gpu in topo.gpus:
        cx, cy = gpu_pos[gpu.index]
        picked = gpu.index in chosen
        shapes.append(
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
        annotations.append(
            {
                "x": cx,
                "y": cy,
                "text": _gpu_text(gpu),
                "showarrow": False,
                "font": {"size": 10, "color": "white" if gpu.up and util > 0.5 else "black"},
            }
        )
        hover_x.append(cx)
        hover_y.append(cy)
        hover_text.append(_gpu_hover(gpu))
    traces: list[go.Scatter] = []
    bottom = gpu_top - _GPU_H
    used_kinds: set[LinkType] = set()
    for link in topo.links:
        if link.a not in gpu_pos or link.b not in gpu_pos:
            continue
        (ax, ay), (bx, by) = gpu_pos[link.a], gpu_pos[link.b]
        dip = 0.25 + 0.12 * abs(bx - ax)
        y0 = ay - _GPU_H / 2
        path = f"M {ax},{y0} Q {(ax + bx) / 2},{y0 - dip} {bx},{by - _GPU_H / 2}"
        bottom = min(bottom, y0 - dip / 2 - 0.2)
        shapes.append(
            {
                "type": "path",
                "name": f"link-{link.a}-{link.b}",
                "path": path,
                "line": {"color": LINK_COLOURS[link.kind], "width": 1.5},
                "opacity": 0.8,
            }
        )
        used_kinds.add(link.kind)
    for kind in LinkType:
        if kind in used_kinds:
            traces.append(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="lines",
                    line={"color": LINK_COLOURS[kind], "width": 3},
                    name=LINK_NAMES[kind],
                    hoverinfo="skip",
                )
            )
    traces.append(
        go.Scatter(
            x=hover_x,
            y=hover_y,
            mode="markers",
            marker={"size": 28, "opacity": 0},
            hovertext=hover_text,
            hoverinfo="text",
            showlegend=False,
            name="details",
        )
    )
    figure = go.Figure(traces)
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        shapes=shapes,
        annotations=annotations,
        xaxis={"visible": False, "range": [-0.2, x + 0.2]},
        yaxis={"visible": False, "range": [bottom - 0.2, top + 0.2]},
        height=460,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.02, "title": {"text": "GPU links: "}},
        uirevision=topo.name,
    )
    return figure


def _nic_shape(
    shapes: list[dict[str, object]],
    annotations: list[dict[str, object]],
    hover: tuple[list[float], list[float], list[str]],
    bus_id: str,
    x: float,
    gpu_top: float,
) -> None:
    hover_x, hover_y, hover_text = hover
    shapes.append(
        {
            "type": "rect",
            "name": f"nic-{bus_id}",
            "x0": x,
            "x1": x + _GPU_W,
            "y0": gpu_top - _GPU_H * 0.6,
            "y1": gpu_top,
            "line": {"color": "#8c564b", "width": 1},
            "fillcolor": "#f2e2d9",
        }
    )
    hover_x.append(x + _GPU_W / 2)
    hover_y.append(gpu_top - _GPU_H * 0.3)
    hover_text.append(f"NIC {bus_id}")
    annotations.append(
        {
            "x": x + _GPU_W / 2,
            "y": gpu_top - _GPU_H * 0.3,
            "text": "NIC",
            "showarrow": False,
            "font": {"size": 9, "color": "#8c564b"},
        }
    )
