// Draws the figures built by monitoring/charts.py (JSON in `[data-chart-json]`) into their
// containers `[data-chart]` with Plotly.react, and again after each auto-refresh. Text colours
// follow the page (light or dark) since the figures have transparent backgrounds.
(function () {
  "use strict";

  function draw() {
    if (!window.Plotly) return;
    const color = getComputedStyle(document.body).color;
    document.querySelectorAll("[data-chart]").forEach(function (box) {
      const holder = document.querySelector('[data-chart-json="' + box.dataset.chart + '"] script');
      if (!holder) {
        if (box.dataset.drawn) window.Plotly.purge(box);
        delete box.dataset.drawn;
        box.hidden = true;
        return;
      }
      box.hidden = false;  // before drawing: Plotly sizes the plot to its (visible) container
      const figure = JSON.parse(holder.textContent);
      const layout = Object.assign({}, figure.layout || {}, {font: {color: color}, autosize: true});
      window.Plotly.react(box, figure.data || [], layout, {responsive: true, displaylogo: false});
      box.dataset.drawn = "true";
    });
  }

  document.addEventListener("console:refreshed", function (event) {
    if (event.detail.regions.indexOf("chart-data") >= 0) draw();
  });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", draw);
  draw();
})();
