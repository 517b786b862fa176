// odradek console: swap in the fragments the server renders, redraw the lag chart.
"use strict";
(function () {
  const live = document.getElementById("live");
  const url = document.body.dataset.events;
  if (!url) return;
  const source = new EventSource(url);
  source.onopen = () => { live.textContent = "live"; live.className = "live on"; };
  source.onerror = () => { live.textContent = "reconnecting"; live.className = "live off"; };
  source.onmessage = (event) => {
    const msg = JSON.parse(event.data);
    for (const [id, html] of Object.entries(msg.html || {})) {
      const el = document.getElementById(id);
      if (el) el.innerHTML = html;
    }
    if (msg.lag && window.odradekLag) window.odradekLag(msg.lag);
    document.body.dataset.seq = msg.seq;
  };
})();

window.odradekLag = function (lag) {
  const el = document.getElementById("lag-chart");
  if (!el || !window.Plotly) return;
  const toTrace = (name, points, width) => ({
    name: name, mode: "lines", line: { width: width },
    x: points.map((p) => new Date(p[0])), y: points.map((p) => p[1]),
  });
  const traces = [toTrace("total", lag.total, 3)];
  for (const [tp, points] of Object.entries(lag.partitions)) traces.push(toTrace(tp, points, 1));
  const layout = { margin: { t: 10, r: 10, b: 40, l: 50 }, height: 280, yaxis: { title: { text: "records" }, rangemode: "tozero" } };
  window.Plotly.react(el, traces, layout, { displayModeBar: false, responsive: true });
  el.dataset.points = String(lag.total.length);
};
