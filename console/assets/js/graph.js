// The workflow graph as SVG, drawn from a run's or a workflow's `graph` (workflow.Draw): nodes
// in layers from the start step (the longest path over the edges that are not loop edges), in
// step order within a layer; loop edges drawn dashed on the side with their bound.

import {s} from './dom.js';

const LINE_H = 16;
const PAD = 10;
const GAP_Y = 64;
const GAP_X = 44;
const MAX_CHARS = 30;
const LABEL_CHARS = 24;

let drawings = 0;

function clip(text) {
  return text.length > MAX_CHARS ? text.slice(0, MAX_CHARS - 1) + '…' : text;
}

// layout places every node: {id → {x, y, w, h, layer}}, and the drawing's width and height.
// mergeEdges draws parallel edges (one per case of a switch to the same step) as one, with
// their labels together.
export function mergeEdges(edges) {
  const out = [];
  const byKey = new Map();
  for (const e of edges || []) {
    const k = `${e.from}\u0000${e.to}\u0000${e.kind}`;
    const had = byKey.get(k);
    if (had) {
      if (e.label && !had.labels.includes(e.label)) had.labels.push(e.label);
      continue;
    }
    const m = {...e, labels: e.label ? [e.label] : []};
    byKey.set(k, m);
    out.push(m);
  }
  for (const m of out) m.label = m.labels.join(', ');
  return out;
}

export function layout(graph) {
  const nodes = graph.nodes || [];
  const edges = mergeEdges(graph.edges);
  const index = new Map(nodes.map((n, i) => [n.id, i]));
  const forward = edges.filter((e) => e.kind !== 'loop' && index.has(e.from) && index.has(e.to));
  const out = new Map(nodes.map((n) => [n.id, []]));
  for (const e of forward) out.get(e.from).push(e.to);

  // Reachable from start (breadth first), then the longest path over forward edges, bounded
  // so that a cycle of an invalid definition cannot loop forever.
  const layer = new Map();
  // The start step; a drawing without one starts from the steps nothing leads to.
  let roots = graph.start && index.has(graph.start) ? [graph.start] : [];
  if (!roots.length) {
    const led = new Set(forward.map((e) => e.to));
    roots = nodes.filter((n) => n.step && !led.has(n.id)).map((n) => n.id);
    if (!roots.length && nodes.length) roots = [nodes[0].id];
  }
  const seen = new Set(roots);
  const queue = [...roots];
  while (queue.length) {
    const u = queue.shift();
    for (const v of out.get(u)) if (!seen.has(v)) { seen.add(v); queue.push(v); }
  }
  for (const id of seen) layer.set(id, 0);
  for (let round = 0; round < nodes.length; round++) {
    let changed = false;
    for (const e of forward) {
      if (!seen.has(e.from)) continue;
      const want = layer.get(e.from) + 1;
      if (want > layer.get(e.to) && want < nodes.length) { layer.set(e.to, want); changed = true; }
    }
    if (!changed) break;
  }
  // Nodes that start cannot reach (files, missing steps, an invalid definition's islands)
  // go under their first predecessor when they have one, else after everything.
  let bottom = Math.max(-1, ...layer.values()) + 1;
  for (const n of nodes) {
    if (layer.has(n.id)) continue;
    const pred = forward.find((e) => e.to === n.id && layer.has(e.from));
    layer.set(n.id, pred ? layer.get(pred.from) + 1 : bottom++);
  }

  const layers = [];
  for (const n of nodes) {
    const l = layer.get(n.id);
    (layers[l] ||= []).push(n);
  }
  const pos = new Map();
  const sizes = nodes.map((n) => {
    const lines = (n.lines && n.lines.length ? n.lines : [n.step || n.id]).map(clip);
    const w = Math.max(110, Math.min(260, Math.max(...lines.map((l) => l.length)) * 7.4 + 2 * PAD));
    return {lines, w, h: lines.length * LINE_H + 2 * PAD + 10};
  });
  let width = 0;
  let y = PAD;
  const rows = [];
  for (const row of layers) {
    if (!row) continue;
    // Order a layer by the mean position of its predecessors (one pass of the barycentre
    // heuristic), which removes most crossings of small workflows.
    if (rows.length) {
      const bary = (n) => {
        const xs = forward.filter((e) => e.to === n.id && pos.has(e.from)).map((e) => pos.get(e.from).cx);
        return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : Infinity;
      };
      row.sort((a, b) => bary(a) - bary(b) || index.get(a.id) - index.get(b.id));
    }
    const rowW = row.reduce((a, n) => a + sizes[index.get(n.id)].w, 0) + GAP_X * (row.length - 1);
    const rowH = Math.max(...row.map((n) => sizes[index.get(n.id)].h));
    let x = 0;
    for (const n of row) {
      const sz = sizes[index.get(n.id)];
      pos.set(n.id, {x, y, w: sz.w, h: sz.h, lines: sz.lines, cx: x + sz.w / 2, layer: layer.get(n.id)});
      x += sz.w + GAP_X;
    }
    rows.push({row, rowW, y});
    width = Math.max(width, rowW);
    y += rowH + GAP_Y;
  }
  // Centre every layer.
  for (const {row, rowW} of rows) {
    const dx = (width - rowW) / 2;
    for (const n of row) { const p = pos.get(n.id); p.x += dx; p.cx += dx; }
  }
  // Room on the left for the edges that skip layers, on the right for loop edges and their
  // labels.
  const loopEdges = edges.filter((e) => e.kind === 'loop' || (pos.has(e.from) && pos.has(e.to) && pos.get(e.to).y <= pos.get(e.from).y));
  const skipEdges = forward.filter((e) => layer.get(e.to) - layer.get(e.from) > 1);
  const skipW = Math.max(0, ...skipEdges.map((e) => Math.min((e.label || '').length, LABEL_CHARS) * 6.7 + 8));
  const left = PAD + (skipEdges.length ? 24 + 14 * skipEdges.length + skipW : 0);
  const labelW = Math.max(0, ...loopEdges.map((e) => Math.min((e.label || 'loop').length, LABEL_CHARS) * 6.7));
  const right = PAD + Math.max(loopEdges.length ? 30 + 22 * loopEdges.length + labelW : 0, skipEdges.length ? 24 + 14 * skipEdges.length + skipW : 0);
  return {pos, width: width + left + right, height: Math.max(y - GAP_Y + PAD, 40), offset: left, inner: width};
}

// childNodes maps the keys of a run's child steps to the nodes that run them: branch N of a
// parallel step (its child edge's `branch`) is the step PARENT#(N-1), and every item of a map
// step (PARENT#ITEM) runs its body, so that a branch's or a body's node shows what its runs
// did. nodeOf(key) is the node's id, or '' for a key that is no child of the graph (an agent's
// tools run as sub-runs of their own).
export function childNodes(graph) {
  const byId = new Map((graph.nodes || []).map((n) => [n.id, n]));
  const branches = new Map(); // PARENT#ITEM → node id
  const bodies = new Map(); // PARENT → node id
  for (const e of graph.edges || []) {
    const from = byId.get(e.from);
    if (e.kind !== 'child' || !from || !from.step || !byId.has(e.to)) continue;
    if (from.type === 'parallel' && e.branch >= 1) branches.set(`${from.step}#${e.branch - 1}`, e.to);
    else if (from.type === 'map') bodies.set(from.step, e.to);
  }
  return {
    nodeOf(key) {
      const i = key.lastIndexOf('#');
      if (i < 0) return '';
      return branches.get(key) || bodies.get(key.slice(0, i)) || '';
    },
    // what names the step or file a child runs, for the table of steps.
    runs(key) {
      const n = byId.get(this.nodeOf(key));
      return n ? n.step || (n.lines || [])[0] || '' : '';
    },
  };
}

// SHOWN orders the statuses of a node that stands for several steps (a map's body, run once per
// item): what is under way first, then what went wrong, then what went well.
const SHOWN = ['waiting', 'running', 'failed', 'timed_out', 'cancelled', 'pending', 'completed', 'skipped'];

// summaryStatus is the one status of a node that shows the steps of statuses (none: '').
export function summaryStatus(statuses) {
  const known = statuses.filter(Boolean);
  if (!known.length) return '';
  return SHOWN.find((st) => known.includes(st)) || known[0];
}

// drawGraph returns the SVG of graph with a title; statusOf(step, node) gives a node's status
// (its class), isCurrent(step, node) whether it runs or waits now, and noteOf(step, node) a
// line for its title (the children it stands for).
export function drawGraph(graph, {title, statusOf = () => '', isCurrent = () => false, noteOf = () => ''} = {}) {
  const n = ++drawings;
  const {pos, width, height, offset, inner} = layout(graph);
  const titleId = `graph-title-${n}`;
  const descId = `graph-desc-${n}`;
  const arrow = `arrow-${n}`;
  const arrowLoop = `arrow-loop-${n}`;
  const steps = (graph.nodes || []).filter((x) => x.step).map((x) => x.step);
  const svg = s('svg', {
    class: 'graph', role: 'img', viewBox: `0 0 ${width} ${height}`, width, height,
    'aria-labelledby': `${titleId} ${descId}`, preserveAspectRatio: 'xMidYMin meet',
  },
  s('title', {id: titleId}, title || 'Workflow graph'),
  s('desc', {id: descId}, `Steps from ${graph.start || 'the start'}: ${steps.join(', ')}. The table of steps lists the same steps with their status.`),
  s('defs', {},
    s('marker', {id: arrow, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
      s('path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead'})),
    s('marker', {id: arrowLoop, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
      s('path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead loop'}))));
  const gEdges = s('g', {class: 'edges'});
  const gNodes = s('g', {class: 'nodes'});
  svg.append(gEdges, gNodes);
  const at = (id) => { const p = pos.get(id); return p && {...p, x: p.x + offset, cx: p.cx + offset}; };

  let loopN = 0;
  let skipN = 0;
  const placed = []; // the boxes of the labels drawn so far
  const free = (box) => !placed.some((o) => o.x < box.x + box.w && box.x < o.x + o.w && o.y < box.y + box.h && box.y < o.y + o.h);
  const labelWidth = (e) => Math.min((e.label || '').length, LABEL_CHARS) * 6.7 + 6;
  // crosses reports whether the straight way from a down to b runs through a node in between.
  const crosses = (a, b) => [...pos.keys()].some((id) => {
    const m = at(id);
    if (m.layer <= a.layer || m.layer >= b.layer) return false;
    const y = m.y + m.h / 2;
    const x = a.cx + (b.cx - a.cx) * (y - (a.y + a.h)) / (b.y - (a.y + a.h));
    return x > m.x - 8 && x < m.x + m.w + 8;
  });
  for (const e of mergeEdges(graph.edges)) {
    const a = at(e.from);
    const b = at(e.to);
    if (!a || !b) continue;
    let d;
    let lx;
    let ly;
    let anchor = 'middle';
    if (e.from === e.to) {
      const x = a.x + a.w;
      const y1 = a.y + a.h / 2;
      d = `M${x},${y1 - 8} C${x + 44},${y1 - 34} ${x + 44},${y1 + 34} ${x},${y1 + 8}`;
      lx = x + 38;
      ly = y1;
      anchor = 'start';
      loopN++;
    } else if (e.kind === 'loop' || b.y <= a.y) {
      // Back to an earlier step: out of a's right side, along the right, into b's right side.
      const x0 = Math.max(a.x + a.w, b.x + b.w);
      const x = offset + inner + 26 + 22 * loopN++;
      const y1 = a.y + a.h / 2;
      const y2 = b.y + b.h / 2;
      d = `M${a.x + a.w},${y1} C${x},${y1} ${x},${y2} ${b.x + b.w},${y2}`;
      lx = x0 + 0.75 * (x - x0) + 6;
      ly = (y1 + y2) / 2;
      anchor = 'start';
    } else if (b.layer - a.layer > 1 && crosses(a, b)) {
      // Down past the steps in between: along the side nearer to the target.
      const onLeft = b.cx <= offset + inner / 2;
      const x = onLeft ? offset - 16 - 14 * skipN++ : offset + inner + 16 + 14 * skipN++;
      const y1 = a.y + a.h;
      const y2 = b.y;
      d = `M${a.cx},${y1} C${a.cx},${y1 + 30} ${x},${y1 + 10} ${x},${y1 + 40} L${x},${y2 - 40} C${x},${y2 - 10} ${b.cx},${y2 - 30} ${b.cx},${y2 - 1}`;
      lx = onLeft ? x - 4 : x + 4;
      ly = (y1 + y2) / 2;
      anchor = onLeft ? 'end' : 'start';
    } else {
      const y1 = a.y + a.h;
      const y2 = b.y;
      const my = (y1 + y2) / 2;
      d = `M${a.cx},${y1} C${a.cx},${my} ${b.cx},${my} ${b.cx},${y2 - 1}`;
      // The label sits near the target, where edges fanning out of one step are apart; where
      // another label is there already, further up the edge.
      const w = labelWidth(e);
      for (const t of [0.8, 0.62, 0.46, 0.3, 0.88]) {
        const bez = (p0, p1, p2, p3) => (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t * t * p2 + t ** 3 * p3;
        lx = bez(a.cx, a.cx, b.cx, b.cx);
        ly = bez(y1, my, my, y2);
        if (!e.label || free({x: lx - w / 2, y: ly - 8, w, h: 16})) break;
      }
    }
    if (e.label) {
      const w = labelWidth(e);
      placed.push({x: anchor === 'middle' ? lx - w / 2 : anchor === 'end' ? lx - w : lx, y: ly - 8, w, h: 16});
    }
    const loop = e.kind === 'loop';
    const g = s('g', {class: ['edge', 'k-' + e.kind], dataset: {from: e.from, to: e.to}},
      s('path', {d, 'marker-end': `url(#${loop ? arrowLoop : arrow})`}));
    const label = loop ? e.label || 'loop' : e.label;
    if (label) {
      const text = s('text', {x: lx, y: ly, class: 'edge-label', 'text-anchor': anchor, 'dominant-baseline': 'middle'}, label.length > LABEL_CHARS ? label.slice(0, LABEL_CHARS - 1) + '…' : label);
      g.append(s('title', {}, `${e.from} → ${e.to}: ${label}`), text);
    }
    gEdges.append(g);
  }

  for (const node of graph.nodes || []) {
    const p = at(node.id);
    const st = statusOf(node.step || '', node);
    const cur = isCurrent(node.step || '', node);
    const note = noteOf(node.step || '', node);
    const g = s('g', {
      class: ['node', node.class && 'c-' + node.class, node.type && 't-' + node.type, st && 'st-' + st, cur && 'current', !node.step && 'aux'],
      dataset: node.step ? {step: node.step, node: node.id} : {node: node.id},
      transform: `translate(${p.x},${p.y})`,
    });
    g.append(s('title', {}, [...(node.lines || []), st ? `status: ${st}` : '', note, cur ? '(current step)' : ''].filter(Boolean).join('\n')));
    g.append(s('rect', {width: p.w, height: p.h, rx: 8, ry: 8}));
    p.lines.forEach((line, i) => {
      g.append(s('text', {x: PAD, y: PAD + 11 + i * LINE_H, class: i === 0 ? 'l0' : 'ln'}, line));
    });
    if (st) g.append(s('text', {x: p.w - 6, y: p.h - 6, class: 'st-label', 'text-anchor': 'end'}, st.replace(/_/g, ' ')));
    gNodes.append(g);
  }
  return svg;
}
