// Progressive enhancement: every figure is in the page's tables; this draws the charts
// from the JSON block beside them when uPlot (vendored, static/vendor/uplot) is loaded.
"use strict";
(function () {
  // The pages write times in UTC; so do the charts' axes, whatever the browser's zone.
  function utc(ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }

  function pct(v) { return v == null ? "–" : (100 * v).toFixed(1) + " %"; }

  // The x-axis spans the selected window, not only the steps that hold data.
  function xScale(s) { return { time: true, range: function () { return [s.start, s.end]; } }; }

  // The step still in progress: shaded and labelled, so its low figures do not read as an
  // outage.
  function partialHook(s) {
    return { draw: [function (u) {
      if (s.partial_from == null) { return; }
      var x0 = u.valToPos(s.partial_from, "x", true), x1 = u.valToPos(s.end, "x", true);
      var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
      ctx.save();
      ctx.fillStyle = "rgba(120, 120, 120, 0.18)";
      ctx.fillRect(x0, top, Math.max(x1 - x0, 2), h);
      ctx.fillStyle = "#555";
      ctx.font = Math.round(10 * devicePixelRatio) + "px sans-serif";
      ctx.textAlign = "right";
      ctx.fillText("partial", x1 - 2, top + 12 * devicePixelRatio);
      ctx.restore();
    }] };
  }

  function ettChart(el, s) {
    return new uPlot({
      width: el.clientWidth || 600, height: 240, tzDate: utc, hooks: partialHook(s),
      scales: { x: xScale(s), y: { range: [0, 1] } },
      series: [{}, { label: "ETT", stroke: s.colours.effective_training, width: 2,
        value: function (u, v) { return pct(v); } }],
      axes: [{}, { size: 60, values: function (u, ticks) {
        return ticks.map(function (v) { return Math.round(100 * v) + " %"; });
      } }],
    }, [s.x, s.ett], el);
  }

  // Stacked GPU-hours: each band is drawn as the running sum, filled down to the band below.
  function componentsChart(el, s, lostOnly) {
    var names = Object.keys(s.components).filter(function (c) {
      return !lostOnly || c !== "effective_training";
    });
    var sums = [], running = s.x.map(function () { return 0; });
    names.forEach(function (c) {
      running = running.map(function (v, i) { return v + s.components[c][i]; });
      sums.push(running.slice());
    });
    var series = [{}], bands = [];
    names.forEach(function (c, i) {
      series.push({ label: c, stroke: s.colours[c], fill: s.colours[c] + "cc", width: 1,
        value: function (u, v, si, idx) {
          return idx == null ? "–" : s.components[c][idx].toFixed(1) + " GPU-h";
        } });
      if (i > 0) { bands.push({ series: [i + 1, i], fill: s.colours[c] + "cc" }); }
    });
    return new uPlot({ width: el.clientWidth || 600, height: 240, tzDate: utc,
      series: series, bands: bands, axes: [{}, { size: 60 }], hooks: partialHook(s),
      scales: { x: xScale(s), y: { range: function (u, lo, hi) { return [0, hi || 1]; } } } },
    [s.x].concat(sums), el);
  }

  function draw() {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll(".chart[data-chart]").forEach(function (el) {
      var block = document.getElementById(el.dataset.series);
      if (!block) { return; }
      var s = JSON.parse(block.textContent);
      if (!s.x.length || s.empty) { el.textContent = "No data in this window."; return; }
      // Kept on the element: the browser tests read the drawn scales from it.
      el.uplot = el.dataset.chart === "ett" ? ettChart(el, s)
        : componentsChart(el, s, el.dataset.chart === "lost");
    });
  }
  document.addEventListener("DOMContentLoaded", draw);
}());
