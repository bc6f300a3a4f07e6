// errands dashboard: live counters (polling every 2 s, paused while the tab is hidden), the theme
// switch, and the users page's live filter.  Everything also works without JavaScript.
(function () {
  "use strict";
  const body = document.body;
  const root = body.dataset.root || "";

  document.querySelectorAll("[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });

  // The "More" menu opens without JavaScript (a <details>); with it, Escape or a click elsewhere closes it.
  document.querySelectorAll("nav .more").forEach(function (menu) {
    menu.addEventListener("keydown", function (e) {
      if (e.key === "Escape" && menu.open) { menu.open = false; menu.querySelector("summary").focus(); }
    });
    document.addEventListener("click", function (e) {
      if (menu.open && !menu.contains(e.target)) { menu.open = false; }
    });
  });

  document.querySelectorAll("[data-live-filter]").forEach(function (input) {
    const table = document.querySelector(input.dataset.liveFilter);
    if (!table) { return; }
    input.addEventListener("input", function () {
      const needle = input.value.trim().toLowerCase();
      table.querySelectorAll("tbody tr[data-filter-text]").forEach(function (row) {
        row.hidden = needle !== "" && row.dataset.filterText.indexOf(needle) === -1;
      });
    });
  });

  const live = document.querySelector("[data-live='overview']");
  if (!live) { return; }
  const auto = document.getElementById("auto-refresh");
  const announcer = document.getElementById("live");
  const banner = document.getElementById("no-worker");
  let timer = null;

  function set(name, value, suffix) {
    document.querySelectorAll("[data-total='" + name + "']").forEach(function (el) {
      const text = Number(value).toLocaleString("en-US") + (suffix || "");
      if (el.textContent !== text) { el.textContent = text; }
    });
  }

  // The chart is SVG drawn on the server (axes, a <title> per bucket for hover): when the totals
  // move, the same chart is fetched again as a fragment and swapped in.
  let chartTotals = null;
  function drawChart(t, windowName) {
    const chart = document.querySelector("[data-chart]");
    if (!chart) { return; }
    const totals = t.total_succeeded + "/" + t.total_failed;
    if (chartTotals === null) { chartTotals = chart.dataset.totals || ""; }
    if (totals === chartTotals) { return; }
    chartTotals = totals;
    fetch(root + "/charts/throughput?window=" + encodeURIComponent(windowName),
          { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { chart.innerHTML = html; })
      .catch(function () { chartTotals = ""; });
  }

  function refresh() {
    const params = new URLSearchParams(window.location.search);
    fetch(root + "/api/overview?window=" + encodeURIComponent(params.get("window") || "1h"),
          { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) {
        Object.keys(data.totals).forEach(function (k) {
          set(k, data.totals[k], data.totals_capped && data.totals_capped[k] ? "+" : "");
        });
        set("succeeded_window", data.throughput.total_succeeded);
        set("failed_window", data.throughput.total_failed);
        drawChart(data.throughput, params.get("window") || "1h");
        set("workers_alive", data.workers_alive);
        document.querySelectorAll(".counter.state-stale").forEach(function (el) {
          el.classList.toggle("warn", data.totals.stale > 0);
        });
        data.queues.forEach(function (q) {
          document.querySelectorAll("[data-queue='" + CSS.escape(q.name) + "'][data-state]").forEach(function (cell) {
            const s = cell.dataset.state;
            const text = Number(q[s]).toLocaleString("en-US") + (q.capped && q.capped[s] ? "+" : "");
            if (cell.textContent !== text) { cell.textContent = text; }
          });
        });
        if (banner) { banner.hidden = !data.no_worker; }
        if (announcer) {
          announcer.textContent = data.totals.ready + " ready, " + data.totals.running + " running, " +
            data.totals.failed + " failed";
        }
      })
      .catch(function () { /* a missed refresh is retried at the next tick */ });
  }

  function schedule() {
    if (timer) { clearInterval(timer); timer = null; }
    if (auto && auto.checked && document.visibilityState === "visible") { timer = setInterval(refresh, 2000); }
  }
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && auto && auto.checked) { refresh(); }
    schedule();
  });
  if (auto) { auto.addEventListener("change", schedule); }
  schedule();
})();
