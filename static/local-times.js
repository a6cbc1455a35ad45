// The server writes every time in UTC (<time datetime="…" data-local>); this shows it in the
// viewer's own zone: how far it is from now as the text ("3 min ago", "in 2 h") and the exact
// local time on hover (and in the text, for a <time data-exact>). It also tells forms which zone their date inputs are read in. A file of
// ours, not an inline script, so the Content-Security-Policy can refuse every inline script.
(function () {
  "use strict";
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  var exact = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    second: "2-digit", timeZoneName: "short"
  });
  // In the text of a <time data-exact>: the time of day, with the date unless it is today.
  var timeOfDay = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
  var dayAndTime = new Intl.DateTimeFormat(undefined, {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23"
  });
  var hourOnly = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  // The server's words (core/time_words.py), so a swap changes nothing: floored below an hour,
  // hours and days rounded to the nearest ("in 3 h" for 2 h 55 min), carried into the next unit.
  var UNITS = [["s", 1, 0], ["min", 60, 0], ["h", 3600, 0.5], ["d", 86400, 0.5]];

  function words(seconds) {
    var abs = Math.abs(seconds);
    for (var i = 0; i < UNITS.length; i++) {
      var amount = Math.floor(abs / UNITS[i][1] + UNITS[i][2]);
      var next = i + 1 < UNITS.length ? UNITS[i + 1][1] : Infinity;
      if (amount * UNITS[i][1] < next) {
        var text = amount + " " + UNITS[i][0];
        return seconds < 0 ? "in " + text : text + " ago";
      }
    }
  }
  window.jobswebWords = words;  // live.js's "last update 3 min ago"

  function refresh(root) {
    var now = Date.now();
    root.querySelectorAll("time[data-local]").forEach(function (el) {
      var at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      el.textContent = words((now - at.getTime()) / 1000);
      if (el.hasAttribute("data-exact")) {
        var today = new Date(now).toDateString() === at.toDateString();
        el.textContent += " · " + (today ? timeOfDay : dayAndTime).format(at);
      }
      el.title = exact.format(at);
    });
    // Chart labels: an hour in UTC (data-hour), shown as the viewer's wall-clock time.
    root.querySelectorAll("[data-hour]").forEach(function (el) {
      var at = new Date(el.getAttribute("data-hour"));
      if (!isNaN(at)) el.textContent = hourOnly.format(at) + (el.getAttribute("data-rest") || "");
    });
    root.querySelectorAll("[data-tz-name]").forEach(function (el) { el.textContent = zone; });
    // A date input's form reads it in this zone; without this script it stays UTC.
    root.querySelectorAll("input[data-tz]").forEach(function (el) { if (!el.value) el.value = zone; });
    // A new definition's timezone starts at the viewer's zone, once: the server only marks a form
    // not yet submitted (one sent back with errors keeps its choice), and a zone picked before this
    // script ran (it is deferred; a quick hand or a slow link) is no longer the server's default.
    root.querySelectorAll("select[data-browser-zone]").forEach(function (el) {
      el.removeAttribute("data-browser-zone");
      var note = el.parentNode.querySelector("[data-browser-zone-note]");
      var picked = el.selectedIndex >= 0 && !el.options[el.selectedIndex].defaultSelected;
      if (picked) {
        if (note) note.textContent = "";
        return;
      }
      var known = Array.prototype.some.call(el.options, function (o) { return o.value === zone; });
      if (known) el.value = zone;
      if (note) note.textContent = known ? "Your browser's zone." : "UTC: your browser's zone, " + zone + ", is not one jobsweb knows.";
      // The note is about the zone shown: another one picked, it no longer says so (issue 54).
      if (note && known) {
        el.addEventListener("change", function () { note.textContent = el.value === zone ? "Your browser's zone." : ""; });
      }
    });
  }

  function all() { refresh(document); }
  document.addEventListener("DOMContentLoaded", all);
  document.addEventListener("htmx:afterSwap", all);
  setInterval(all, 30000);  // seconds-old words drift; half a minute keeps them honest
})();
