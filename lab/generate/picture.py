"""A picture of the fabric (SVG, no dependencies): planes by colour, segments as boxes, rails labelled.

Small labs are drawn link by link; Pod-sized ones are drawn as a summary (a 45K-line SVG helps nobody).
In a detailed picture every node's box carries data-node and every link's line data-link (link_id), so the
live view and the reports colour them by state.
"""

from __future__ import annotations

from html import escape

from hpnlab.model.topology import Link, Topology

PLANE_COLOURS = {0: "#1f77b4", 1: "#e6772e", None: "#555555"}
DETAIL_LIMIT = 600  # links


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "middle", weight: str = "normal",
          fill: str = "#222") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}" font-family="sans-serif">{escape(s)}</text>')


def _box(x: float, y: float, w: float, h: float, fill: str, stroke: str = "#333", rx: int = 4, node: str = "") -> str:
    tag = f' class="node" data-node="{escape(node)}"' if node else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" fill="{fill}" '
            f'stroke="{stroke}"{tag}/>')


def link_id(lk: Link) -> str:
    """A link's name in the picture and in the web views: both ends, node:interface, in the topology's
    order. The live view and the reports find a link's line by it (data-link)."""
    return f"{lk.a.node}:{lk.a.iface}|{lk.b.node}:{lk.b.iface}"


def _line(x1: float, y1: float, x2: float, y2: float, colour: str, width: float = 1.2, dash: str = "",
          link: str = "") -> str:
    d = f' stroke-dasharray="{dash}"' if dash else ""
    tag = f' class="link" data-link="{escape(link)}"' if link else ""
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
            f'stroke-width="{width}" stroke-opacity="0.75"{d}{tag}/>')


def _svg(w: float, h: float, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n{_text(w / 2, 22, title, 15, weight="bold")}\n'
            + "\n".join(body) + "\n</svg>\n")


def _legend(x: float, y: float, spec_planes: int) -> list[str]:
    out = []
    items = [(PLANE_COLOURS[0], "plane 0 / port 0 (ToR a)"), (PLANE_COLOURS[1], "plane 1 / port 1 (ToR b)")]
    if spec_planes == 1:
        items = [(PLANE_COLOURS[None], "Clos tier 2 (every ToR to every agg)")] + items
    for i, (c, label) in enumerate(items):
        out.append(_line(x, y + i * 16, x + 24, y + i * 16, c, 3))
        out.append(_text(x + 30, y + i * 16 + 4, label, 11, "start"))
    return out


def fabric_svg(topo: Topology) -> str:
    spec = topo.spec
    title = (f"hpnlab '{topo.name}': {spec.access}, tier 2 {spec.tier2}, {spec.segments} segments x "
             f"{spec.hosts_per_segment} hosts x {spec.rails} rails")
    if len(topo.links) > DETAIL_LIMIT:
        return _summary_svg(topo, title)
    hosts = [n for n in topo.nodes if n.role == "host"]
    tors = [n for n in topo.nodes if n.role == "tor"]
    aggs = [n for n in topo.nodes if n.role == "agg"]
    cores = [n for n in topo.nodes if n.role == "core"]
    col, margin = 70.0, 40.0
    per_seg = max(len(tors) // spec.segments, spec.hosts_per_segment)
    width = max(margin * 2 + spec.segments * (per_seg * col + 30), 720.0)
    y = {"core": 70.0, "agg": 170.0 if cores else 80.0}
    y["tor"], y["host"] = y["agg"] + 170, y["agg"] + 330
    pos: dict[str, tuple[float, float]] = {}
    body: list[str] = []
    seg_w = (width - 2 * margin) / spec.segments
    for s in range(spec.segments):
        x0 = margin + s * seg_w
        body.append(_box(x0 + 4, y["tor"] - 34, seg_w - 8, y["host"] - y["tor"] + 74, "#f4f4f4", "#bbb", 10))
        body.append(_text(x0 + seg_w / 2, y["host"] + 36, f"segment {s}", 12, weight="bold"))
        st = [t for t in tors if t.segment == s]
        for i, t in enumerate(st):
            pos[t.name] = (x0 + (i + 0.5) * seg_w / len(st), y["tor"])
        sh = [h for h in hosts if h.segment == s]
        for i, h in enumerate(sh):
            pos[h.name] = (x0 + (i + 0.5) * seg_w / len(sh), y["host"])

    def spread(nodes, yy):
        for i, n in enumerate(nodes):
            pos[n.name] = (margin + (i + 0.5) * (width - 2 * margin) / len(nodes), yy)

    spread(aggs, y["agg"])
    spread(cores, y["core"])
    by_name = {n.name: n for n in topo.nodes}
    for lk in topo.links:  # lines first, boxes on top
        (x1, y1), (x2, y2) = pos[lk.a.node], pos[lk.b.node]
        if lk.kind in ("peer", "oob"):  # the stacked pair's links: short arcs between the two ToRs
            body.append(_line(x1, y1 + (6 if lk.kind == "peer" else 12), x2, y2 + (6 if lk.kind == "peer" else 12),
                              "#c62828" if lk.kind == "peer" else "#9e9e9e", 2.0 if lk.kind == "peer" else 1.0,
                              link=link_id(lk)))
        elif lk.kind == "access":
            colour = PLANE_COLOURS[lk.host_port] if spec.access != "single-tor" else PLANE_COLOURS[None]
            body.append(_line(x1 + (lk.host_port - 0.5) * 8, y1, x2, y2, colour, 1.0, link=link_id(lk)))
        else:
            plane = by_name[lk.b.node].plane if spec.tier2 == "dual-plane" else None
            body.append(_line(x1, y1, x2, y2, PLANE_COLOURS[plane], 1.2, link=link_id(lk)))
    for n in topo.nodes:
        x, yy = pos[n.name]
        w = 56 if n.role != "host" else 50
        fill = {"host": "#e8f5e9", "tor": "#fff8e1", "agg": "#e3f2fd", "core": "#ede7f6"}[n.role]
        stroke = PLANE_COLOURS[n.plane] if n.role != "host" else "#2e7d32"
        body.append(_box(x - w / 2, yy - 13, w, 26, fill, stroke, node=n.name))
        body.append(_text(x, yy + 4, n.name, 10))
        if n.role == "tor":
            body.append(_text(x, yy - 18, f"rail {n.rail}" + (f" {n.side}" if n.side else ""), 9, fill="#666"))
        if n.role == "agg" and spec.tier2 == "dual-plane":
            body.append(_text(x, yy - 18, f"plane {n.plane}", 9, fill=PLANE_COLOURS[n.plane]))
    for label, role in (("cores", "core"), ("aggs", "agg"), ("ToRs", "tor"), ("hosts", "host")):
        if role in y and any(n.role == role for n in topo.nodes):
            body.append(_text(8, y[role] + 4, label, 11, "start", "bold", "#666"))
    body += _legend(margin, y["host"] + 60, spec.planes)
    return _svg(width, y["host"] + 110, body, title)


def _summary_svg(topo: Topology, title: str) -> str:
    """Pod scale: segments and planes as boxes with counts, link bundles as single labelled lines."""
    spec = topo.spec
    n_seg = spec.segments
    width = max(120.0 + n_seg * 120, 800.0)
    body: list[str] = []
    plane_w = (width - 80) / spec.planes
    ya, yt = 90.0, 300.0
    planes = []
    for p in range(spec.planes):
        x = 40 + p * plane_w
        c = PLANE_COLOURS[p if spec.planes == 2 else None]
        body.append(_box(x + 10, ya, plane_w - 20, 50, "#e3f2fd", c))
        label = f"plane {p}: {spec.aggs_per_plane} aggs" if spec.planes == 2 else f"{spec.aggs_per_plane} aggs"
        body.append(_text(x + plane_w / 2, ya + 30, label, 13, weight="bold"))
        planes.append((x + plane_w / 2, ya + 50, c))
        if spec.tier3:
            body.append(_box(x + 40, ya - 60, plane_w - 80, 34, "#ede7f6", c))
            body.append(_text(x + plane_w / 2, ya - 38, f"{spec.tier3.cores_per_plane} cores", 12))
            body.append(_line(x + plane_w / 2, ya - 26, x + plane_w / 2, ya, c, 3))
    seg_w = (width - 80) / n_seg
    for s in range(n_seg):
        x = 40 + s * seg_w
        body.append(_box(x + 4, yt, seg_w - 8, 90, "#f4f4f4", "#999"))
        body.append(_text(x + seg_w / 2, yt + 18, f"seg {s}", 11, weight="bold"))
        body.append(_text(x + seg_w / 2, yt + 38, f"{spec.rails * spec.tors_per_set} ToRs", 10))
        body.append(_text(x + seg_w / 2, yt + 56, f"{spec.hosts_per_segment} hosts", 10))
        body.append(_text(x + seg_w / 2, yt + 74, f"{spec.hosts_per_segment * spec.rails} GPUs", 10))
        for p, (px, py, c) in enumerate(planes):
            off = (p - (len(planes) - 1) / 2) * 10
            body.append(_line(x + seg_w / 2 + off, yt, px, py, c, 1.0))
    per = spec.rails * (1 if spec.planes == 2 else spec.tors_per_set)
    body.append(_text(width / 2, yt + 120, f"each segment: {per} ToRs x {spec.aggs_per_plane} aggs per plane "
                      f"= {per * spec.aggs_per_plane} uplinks per plane; "
                      f"{len(topo.links)} links in all", 12))
    body += _legend(40, yt + 145, spec.planes)
    return _svg(width, yt + 190, body, title)
