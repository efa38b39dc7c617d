/* Replay: step through stored events. Nothing is fetched or executed; the page already
 * holds every event and the rebuilt conversation, this only shows and hides them. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("replay");
    if (!root) return;
    var ctx = JSON.parse(document.getElementById("replay-ctx").textContent || "[]");
    var events = Array.prototype.slice.call(document.querySelectorAll("#timeline > .ev"));
    var msgs = Array.prototype.slice.call(document.querySelectorAll(".ctx-msg"));
    var slider = document.getElementById("replay-slider");
    var pos = document.getElementById("replay-pos");
    var count = document.getElementById("ctx-count");
    var total = events.length;
    var current = total;

    function show(n) {
      if (!total) return;
      current = Math.max(1, Math.min(total, n));
      events.forEach(function (el, i) {
        el.classList.toggle("future", i >= current);
        el.classList.toggle("current", i === current - 1);
      });
      var seen = ctx[current - 1] || 0;
      msgs.forEach(function (m, i) {
        m.hidden = i >= seen;
        m.classList.toggle("newest", i === seen - 1);
      });
      slider.value = String(current);
      pos.textContent = String(current);
      count.textContent = "(" + seen + " message" + (seen === 1 ? "" : "s") + ")";
      var cur = events[current - 1];
      if (cur) cur.scrollIntoView({ block: "nearest" });
      if (history.replaceState) history.replaceState(null, "", "#step-" + current);
    }

    document.getElementById("replay-prev").addEventListener("click", function () { show(current - 1); });
    document.getElementById("replay-next").addEventListener("click", function () { show(current + 1); });
    slider.addEventListener("input", function () { show(parseInt(slider.value, 10)); });
    document.addEventListener("keydown", function (e) {
      var tag = (e.target && e.target.tagName) || "";
      if (tag === "INPUT" && e.target !== slider) return;
      if (tag === "TEXTAREA") return;
      if (e.key === "ArrowLeft" || e.key === "k") { show(current - 1); e.preventDefault(); }
      else if (e.key === "ArrowRight" || e.key === "j") { show(current + 1); e.preventDefault(); }
      else if (e.key === "Home") { show(1); e.preventDefault(); }
      else if (e.key === "End") { show(total); e.preventDefault(); }
    });
    var m = location.hash.match(/^#step-(\d+)$/);
    show(m ? parseInt(m[1], 10) : 1);
  });
})();
