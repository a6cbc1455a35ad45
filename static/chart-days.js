// A week's chart (the metrics page's 7 days): its bars start at UTC times (<text data-day="…">,
// one per bar, in order); this writes the viewer's day ("Tue 02") under the bar in which each of
// their days begins and clears the others, so the days are the viewer's, like every other time on
// the pages (a bar of 4 hours from 23:00 to 03:00 carries the new day). Without it the server's
// labels stay: a UTC day every sixth bar. A file of ours, not an inline script, so the
// Content-Security-Policy can refuse every inline script.
(function () {
  "use strict";
  var day = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "2-digit" });
  var date = new Intl.DateTimeFormat("en-CA", { year: "numeric", month: "2-digit", day: "2-digit" });

  function relabel(root) {
    root.querySelectorAll("svg").forEach(function (svg) {
      var labels = svg.querySelectorAll("text[data-day]");
      var starts = Array.prototype.map.call(labels, function (el) { return new Date(el.getAttribute("data-day")); });
      if (starts.length < 2 || starts.some(isNaN)) return;
      var step = starts[1] - starts[0];
      var previous = null;
      labels.forEach(function (el, i) {
        var last = new Date(starts[i].getTime() + step - 1);  // the bar's last instant
        var today = date.format(last);
        // The first bar's day began before the chart: not labelled, or its label would overlap the next.
        el.textContent = previous !== null && today !== previous ? day.format(last) : "";
        previous = today;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { relabel(document); });
  document.addEventListener("htmx:afterSwap", function (event) { relabel(event.target); });
})();
