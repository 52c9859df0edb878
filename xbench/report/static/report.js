/* xbench report: sortable, filterable tables and interactive charts (Chart.js, inlined above this script).
   Record text is only ever set as textContent or drawn on a canvas; nothing is fetched. */
(() => {
'use strict';

// ---- numbers: as the report's tables write them (metrics/numbers.compact): 23,640 / 3.2 / 0.0137
function fmt(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return '';
  const a = Math.abs(v);
  if (a >= 1000 && a < 1e15) return Math.round(v).toLocaleString('en-US');
  if (Number.isInteger(v)) return String(v);
  return String(Number(v.toPrecision(digits)));
}

// ---- tables: click a header to sort (again: the other way), type in the box to filter
function cellKey(td) {
  if (!td) return null;
  if (td.dataset.v !== undefined) return parseFloat(td.dataset.v);
  const t = td.textContent.trim();
  return t === '' ? null : t.toLowerCase();
}

function sortBy(table, col, th) {
  const dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
  for (const h of table.tHead.rows[0].cells) h.removeAttribute('aria-sort');
  th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
  const body = table.tBodies[0];
  const rows = [...body.rows].map((r, i) => [cellKey(r.cells[col]), i, r]);
  rows.sort((a, b) => {
    if (a[0] === null || b[0] === null) return a[0] === b[0] ? a[1] - b[1] : (a[0] === null ? 1 : -1);  // blanks last
    if (typeof a[0] !== typeof b[0]) return (typeof a[0] === 'number' ? -1 : 1) * dir;
    const c = typeof a[0] === 'number' ? a[0] - b[0] : a[0].localeCompare(b[0], 'en', {numeric: true});
    return c ? c * dir : a[1] - b[1];
  });
  body.append(...rows.map(x => x[2]));
}

function filterRows(table, text, count) {
  const terms = text.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  const rows = table.tBodies[0].rows;
  for (const r of rows) {
    const label = r.querySelector('td.label');
    const hay = (r.textContent + ' ' + (label ? label.title : '')).toLowerCase();
    r.hidden = !terms.every(t => hay.includes(t));
    shown += r.hidden ? 0 : 1;
  }
  count.textContent = terms.length ? `${shown} of ${rows.length} rows` : '';
}

function tables() {
  for (const box of document.querySelectorAll('.xb-table')) {
    const table = box.querySelector('table');
    [...table.tHead.rows[0].cells].forEach((th, i) => {
      th.tabIndex = 0;
      th.addEventListener('click', () => sortBy(table, i, th));
      th.addEventListener('keydown', e => { if (e.key === 'Enter') sortBy(table, i, th); });
    });
    const input = box.querySelector('input.xb-filter');
    const count = box.querySelector('.xb-count');
    if (input) input.addEventListener('input', () => filterRows(table, input.value, count));
  }
}

// ---- charts
const BLUE = '#1f77b4';

function tip() {  // one tooltip element for the page, filled from the hovered point (textContent only)
  let el = document.getElementById('xb-tip');
  if (!el) {
    el = document.createElement('div');
    el.id = 'xb-tip';
    el.setAttribute('role', 'tooltip');
    document.body.appendChild(el);
  }
  return el;
}

function external(lines) {  // Chart.js external tooltip: an HTML box next to the point
  return ({chart, tooltip}) => {
    const el = tip();
    if (!tooltip.opacity || !tooltip.dataPoints || !tooltip.dataPoints.length) { el.style.opacity = 0; return; }
    const p = tooltip.dataPoints[0];
    const [head, ...rest] = lines(p.dataset, p.dataIndex);
    el.replaceChildren();
    const b = document.createElement('b');
    b.textContent = head;
    el.appendChild(b);
    for (const s of rest.filter(Boolean)) {
      const d = document.createElement('div');
      d.textContent = s;
      el.appendChild(d);
    }
    const r = chart.canvas.getBoundingClientRect();
    const x = r.left + window.scrollX + tooltip.caretX, y = r.top + window.scrollY + tooltip.caretY;
    el.style.opacity = 1;
    el.style.left = Math.min(x + 12, window.scrollX + document.documentElement.clientWidth - el.offsetWidth - 8) + 'px';
    el.style.top = (y + 12) + 'px';
  };
}

const whiskers = {  // error bars (a figure's spread) and reference lines (a target, the baseline's 1)
  id: 'xbExtras',
  afterDatasetsDraw(chart, _args, opts) {
    const ctx = chart.ctx, area = chart.chartArea, horizontal = chart.options.indexAxis === 'y';
    const vs = horizontal ? chart.scales.x : chart.scales.y;
    ctx.save();
    ctx.strokeStyle = '#262626';
    ctx.lineWidth = 1;
    chart.data.datasets.forEach((ds, i) => {
      if (!ds.xb || !chart.isDatasetVisible(i)) return;
      chart.getDatasetMeta(i).data.forEach((el, j) => {
        const d = ds.xb[j];
        if (!d || d.low === null || d.high === null || d.low === undefined || d.high === undefined) return;
        const a = vs.getPixelForValue(d.low), b = vs.getPixelForValue(d.high);
        if (!Number.isFinite(a) || !Number.isFinite(b)) return;
        ctx.strokeStyle = ds.xbWhisker || '#262626';
        ctx.beginPath();
        if (horizontal) {
          ctx.moveTo(a, el.y); ctx.lineTo(b, el.y);
          ctx.moveTo(a, el.y - 3); ctx.lineTo(a, el.y + 3); ctx.moveTo(b, el.y - 3); ctx.lineTo(b, el.y + 3);
        } else {
          ctx.moveTo(el.x, a); ctx.lineTo(el.x, b);
          ctx.moveTo(el.x - 3, a); ctx.lineTo(el.x + 3, a); ctx.moveTo(el.x - 3, b); ctx.lineTo(el.x + 3, b);
        }
        ctx.stroke();
      });
    });
    const dashes = [[5, 3], [1.5, 2], [6, 2, 1, 2], [3, 1]];
    (opts.refs || []).forEach((r, k) => {
      if (r.value === null || (opts.hidden && opts.hidden.has(r.label))) return;
      const s = r.axis === 'x' ? chart.scales.x : chart.scales.y;
      const p = s.getPixelForValue(r.value);
      if (!Number.isFinite(p)) return;
      ctx.setLineDash(dashes[k % 4]);
      ctx.strokeStyle = ['#000', '#737373', '#404040', '#999'][k % 4];
      ctx.beginPath();
      if (r.axis === 'x') { ctx.moveTo(p, area.top); ctx.lineTo(p, area.bottom); }
      else { ctx.moveTo(area.left, p); ctx.lineTo(area.right, p); }
      ctx.stroke();
    });
    ctx.restore();
  },
};

function axisTicks(log) {
  return {
    color: '#333', font: {size: 11},
    callback(v) {
      if (!log) return fmt(v, 3);
      const m = v / 10 ** Math.floor(Math.log10(v));
      return [1, 2, 5].includes(Math.round(m * 1000) / 1000) ? fmt(v, 3) : '';
    },
  };
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const BASE = {animation: false, responsive: true, maintainAspectRatio: false, events: ['mousemove', 'mouseout', 'click']};

function hbarCharts(spec, host) {
  const hues = Object.keys(spec.hues || {});
  const charts = [];
  for (const f of spec.facets) {
    const box = el('div', 'xb-facet');
    if (f.title) box.appendChild(el('div', 'xb-ftitle', f.title));
    const wrap = el('div', 'xb-canvas');
    wrap.style.height = Math.max(110, 22 * f.bars.length + 58) + 'px';
    const canvas = document.createElement('canvas');
    wrap.appendChild(canvas);
    box.appendChild(wrap);
    if (f.left_out) box.appendChild(el('div', 'xb-more', `… ${f.left_out} more bars between these (every row is in the tables)`));
    host.appendChild(box);
    const groups = hues.length ? [...hues, ...new Set(f.bars.map(b => b.hue).filter(h => !hues.includes(h)))] : [null];
    const datasets = groups.map(h => ({
      label: h === null ? spec.xlabel : String(h), xbKey: h === null ? '' : String(h),
      data: f.bars.map(b => (h === null || b.hue === h) && b.value !== null && (!f.log || b.value > 0) ? b.value : null),
      xb: f.bars.map(b => (h === null || b.hue === h) ? b : null),
      backgroundColor: h === null ? BLUE : (spec.hues[h] || '#999'), grouped: false, barPercentage: 0.8,
      categoryPercentage: 0.9,
    }));
    const xlabel = f.xlabel || spec.xlabel;
    const lines = (ds, i) => {
      const b = ds.xb[i];
      return [b.label, `${xlabel || 'value'}: ${b.text || fmt(b.value)}`,
        b.low !== null && b.high !== null ? `spread: ${fmt(b.low)} to ${fmt(b.high)}` : '',
        b.hue ? `group: ${b.hue}` : '', b.runs > 1 ? `${b.runs} runs` : ''];
    };
    const chart = new Chart(canvas, {
      type: 'bar',
      data: {labels: f.bars.map(b => b.short), datasets},
      options: {...BASE, indexAxis: 'y',
        scales: {
          x: {type: f.log ? 'logarithmic' : 'linear', beginAtZero: !f.log, ticks: axisTicks(f.log),
              title: {display: !!xlabel, text: xlabel}},
          y: {ticks: {autoSkip: false, color: '#222', font: {size: 11}}},
        },
        interaction: {mode: 'nearest', axis: 'y', intersect: false},
        plugins: {legend: {display: false}, tooltip: {enabled: false, external: external(lines)},
                  xbExtras: {refs: spec.ref ? [{value: spec.ref[0], label: spec.ref[1], axis: 'x'}] : []}}},
      plugins: [whiskers],
    });
    charts.push(chart);
  }
  const keys = hues.map(h => [h, spec.hues[h]]);
  return [charts, keys, spec.ref ? [[spec.ref[1], '#000', true]] : []];
}

function lineCharts(spec, host) {
  const grid = el('div', 'xb-grid');
  host.appendChild(grid);
  const charts = [], keys = new Map(), refs = new Map();
  for (const p of spec.panels) {
    const box = el('div', 'xb-facet');
    if (p.title) box.appendChild(el('div', 'xb-ftitle', p.title));
    const wrap = el('div', 'xb-canvas');
    wrap.style.height = '300px';
    const canvas = document.createElement('canvas');
    wrap.appendChild(canvas);
    box.appendChild(wrap);
    grid.appendChild(box);
    const datasets = p.lines.map(ln => {
      if (!ln.grey) keys.set(ln.label, ln.color);
      return {label: ln.short, xbKey: ln.grey ? 'grey' : ln.label, xbFull: ln.label, xbWhisker: ln.color,
        data: ln.points.filter(q => q[0] !== null && q[1] !== null).map(q => ({x: q[0], y: q[1]})),
        xb: ln.grey ? null : ln.points.filter(q => q[0] !== null && q[1] !== null).map(q => ({low: q[2], high: q[3]})),
        borderColor: ln.color, backgroundColor: ln.color, borderWidth: ln.grey ? 0.8 : 1.6,
        pointRadius: ln.grey ? 1.5 : 3, pointHoverRadius: 5, order: ln.grey ? 2 : 1};
    });
    if (p.lines.some(ln => ln.grey)) keys.set('grey', '#b8b8b8');
    for (const [name, pts] of Object.entries(p.ref_points || {})) {
      refs.set(name, '#000');
      datasets.push({label: name, xbKey: name, xbFull: name, data: pts.filter(q => q[0] !== null && q[1] !== null)
        .map(q => ({x: q[0], y: q[1]})), borderColor: '#000', borderDash: [5, 4], borderWidth: 1, pointRadius: 0});
    }
    const hlines = Object.entries(p.hlines || {}).map(([label, value]) => ({label, value, axis: 'y'}));
    for (const h of hlines) refs.set(h.label, '#000');
    const xs = [...new Set(p.lines.flatMap(ln => ln.points.map(q => q[0])).filter(x => x !== null))].sort((a, b) => a - b);
    const lines = (ds, i) => {
      const q = ds.data[i], e = ds.xb ? ds.xb[i] : null;
      return [ds.xbFull, `${spec.xlabel || 'x'}: ${fmt(q.x)}`, `${p.ylabel || 'y'}: ${fmt(q.y)}`,
        e && e.low !== null && e.high !== null ? `spread: ${fmt(e.low)} to ${fmt(e.high)}` : ''];
    };
    const log = spec.log_x && xs.length && xs[0] > 0;
    charts.push(new Chart(canvas, {
      type: 'line',
      data: {datasets},
      options: {...BASE, parsing: true,
        scales: {
          x: {type: log ? 'logarithmic' : 'linear', ticks: axisTicks(false), title: {display: !!spec.xlabel, text: spec.xlabel},
              afterBuildTicks: xs.length && xs.length <= 8 ? (a => { a.ticks = xs.map(value => ({value})); }) : undefined},
          y: {beginAtZero: spec.ylim0, ticks: axisTicks(false), title: {display: !!p.ylabel, text: p.ylabel}},
        },
        interaction: {mode: 'nearest', intersect: false},
        plugins: {legend: {display: false}, tooltip: {enabled: false, external: external(lines)},
                  xbExtras: {refs: hlines, hidden: new Set()}}},
      plugins: [whiskers],
    }));
  }
  return [charts, [...keys], [...refs].map(([k, c]) => [k, c, true])];
}

function legend(fig, charts, keys, refs, greyCount) {  // one legend for all facets of a figure: click to hide a series
  const items = [...keys.map(([k, c]) => [k, c, false]), ...refs];
  if (!items.length) return;
  const box = el('div', 'xb-legend');
  for (const [key, color, ref] of items) {
    const b = el('button', 'xb-key', key === 'grey' ? `${greyCount} more (grey)` : key);
    b.type = 'button';
    b.dataset.key = key;
    const sw = el('span', ref ? 'xb-swatch ref' : 'xb-swatch');
    sw.style.borderColor = color;
    if (!ref) sw.style.background = color;
    b.prepend(sw);
    b.addEventListener('click', () => {
      const off = !b.classList.contains('off');
      b.classList.toggle('off', off);
      for (const ch of charts) {
        ch.data.datasets.forEach((ds, i) => { if (ds.xbKey === key) ch.setDatasetVisibility(i, !off); });
        const h = ch.options.plugins.xbExtras.hidden || new Set();
        if (off) h.add(key); else h.delete(key);
        ch.options.plugins.xbExtras.hidden = h;
        ch.update();
      }
    });
    box.appendChild(b);
  }
  fig.insertBefore(box, fig.querySelector('.xb-chart'));
}

function charts() {
  if (typeof Chart === 'undefined') return;  // the library failed to load: the PNG links remain
  Chart.defaults.font.family = 'system-ui,-apple-system,Segoe UI,Roboto,sans-serif';
  window.xbenchCharts = {};
  for (const fig of document.querySelectorAll('figure.xb-figure')) {
    const spec = JSON.parse(fig.querySelector('script.xb-spec').textContent);
    const host = fig.querySelector('.xb-chart');
    const [made, keys, refs] = spec.kind === 'hbar' ? hbarCharts(spec, host) : lineCharts(spec, host);
    const grey = spec.kind === 'line' ? new Set(spec.panels.flatMap(p => p.lines.filter(l => l.grey).map(l => l.label))).size : 0;
    legend(fig, made, keys, refs, grey);
    window.xbenchCharts[fig.id] = made;
    fig.classList.add('drawn');
  }
}

function start() { tables(); charts(); }
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
