/* agentweb live updates: small, dependency-free WebSocket client.
 *
 * Run page: events arrive as server-rendered, escaped fragments whose root carries
 * id="event-<seq>"; a repeated seq replaces its element, a gap asks the server to resend,
 * and every reconnect resumes from the last seq seen. Model text streamed before a step
 * is stored is shown with textContent only.
 */
(function () {
  "use strict";

  var conn = null;
  var banner = null;
  var bannerTimer = null;
  function setConn(state) {
    conn = conn || document.getElementById("conn");
    banner = banner || document.getElementById("conn-banner");
    if (conn) conn.dataset.state = state;
    if (!banner) return;
    clearTimeout(bannerTimer);
    if (state === "offline" || state === "retrying" || state === "reconnecting") {
      // A brief blip is not worth a banner; a real outage is ("reconnecting": the server
      // said its live feed is interrupted, so say so at once).
      bannerTimer = setTimeout(function () {
        banner.hidden = false;
      }, state === "retrying" ? 1500 : 0);
    } else if (state !== "connecting") {
      banner.hidden = true;
    }
  }

  function csrfToken() {
    var m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function fragment(html) {
    // html is rendered and escaped by Django templates on the server, never raw event text.
    var tpl = document.createElement("template");
    tpl.innerHTML = html;
    var token = csrfToken();
    tpl.content.querySelectorAll('input[name="csrfmiddlewaretoken"]').forEach(function (input) {
      if (!input.value) input.value = token;
    });
    return tpl.content;
  }

  function activate(el) {
    if (window.htmx && el) window.htmx.process(el);
  }

  /* A socket that reconnects with exponential backoff and jitter. */
  function LiveSocket(pathFn, handlers) {
    this.pathFn = pathFn;
    this.handlers = handlers;
    this.attempt = 0;
    this.ws = null;
    this.stopped = false;
    this.timer = null;
    var self = this;
    window.addEventListener("offline", function () {
      if (self.ws) self.ws.close();
    });
    window.addEventListener("online", function () {
      if (!self.stopped) {
        self.attempt = 0;
        self.connectSoon(0);
      }
    });
    this.connect();
  }
  LiveSocket.prototype.connect = function () {
    var self = this;
    if (this.stopped) return;
    if (this.ws && this.ws.readyState <= 1) return;
    clearTimeout(this.timer);
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var ws;
    try {
      ws = new WebSocket(proto + location.host + this.pathFn());
    } catch (e) {
      this.connectSoon();
      return;
    }
    this.ws = ws;
    setConn("connecting");
    ws.onopen = function () {
      self.attempt = 0;
      setConn("open");
      if (self.handlers.open) self.handlers.open(ws);
    };
    ws.onmessage = function (msg) {
      var data;
      try {
        data = JSON.parse(msg.data);
      } catch (e) {
        return;
      }
      if (data && data.kind === "live") {
        // The server's channel layer went away or came back; the socket stays open.
        setConn(data.ok ? "open" : "reconnecting");
        return;
      }
      self.handlers.message(data, ws);
    };
    ws.onclose = function (ev) {
      if (self.ws === ws) self.ws = null;
      // 4401 logged out, 4403 not visible, 4404 no such run, 4400/4009 frames refused:
      // trying again cannot help.
      if (ev.code === 4401 || ev.code === 4403 || ev.code === 4404 || ev.code === 4400 || ev.code === 4009) {
        self.stopped = true;
        setConn("denied");
        return;
      }
      if (self.stopped) return;
      setConn(navigator.onLine === false ? "offline" : "retrying");
      self.connectSoon();
    };
  };
  LiveSocket.prototype.connectSoon = function (delay) {
    var self = this;
    if (this.stopped) return;
    clearTimeout(this.timer);
    if (delay === undefined) {
      delay = Math.min(10000, 250 * Math.pow(2, this.attempt)) * (0.75 + Math.random() * 0.5);
      this.attempt += 1;
    }
    this.timer = setTimeout(function () {
      self.connect();
    }, delay);
  };
  LiveSocket.prototype.stop = function () {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close();
  };
  window.AgentwebLiveSocket = LiveSocket;

  /* --- run page ----------------------------------------------------------------------- */
  function runPage(root) {
    var runId = root.dataset.run;
    var lastSeq = parseInt(root.dataset.lastSeq || "0", 10);
    var list = document.getElementById("timeline");
    var preview = document.getElementById("delta-preview");
    var previewText = document.getElementById("delta-text");
    var note = document.getElementById("live-note");
    var socket;
    var previewNode = null; // the preview's text node
    var previewLen = 0; // characters of the current model reply shown so far

    function showDelta(data) {
      // Deltas carry only new text and its offset in the reply; offset 0 starts a new one.
      var offset = typeof data.offset === "number" ? data.offset : 0;
      var text = String(data.text || "");
      if (!previewNode || offset === 0) {
        previewNode = document.createTextNode("");
        previewText.replaceChildren(previewNode);
        previewLen = 0;
      }
      if (offset > previewLen) {
        previewNode.appendData("… "); // joined mid-reply, or a wake-up was lost
        previewLen = offset;
      } else if (offset < previewLen) {
        var cut = Math.min(previewNode.length, previewLen - offset);
        previewNode.deleteData(previewNode.length - cut, cut);
        previewLen = offset;
      }
      previewNode.appendData(text); // text, never markup
      previewLen += text.length;
      preview.hidden = false;
      preview.scrollIntoView({ block: "nearest" });
    }

    function place(seq, node) {
      var el = node.firstElementChild;
      if (!el || el.id !== "event-" + seq) return;
      var existing = document.getElementById(el.id);
      if (existing) {
        existing.replaceWith(el);
      } else {
        var after = null;
        for (var i = list.children.length - 1; i >= 0; i--) {
          var s = parseInt(list.children[i].dataset.seq || "0", 10);
          if (s < seq) break;
          after = list.children[i];
        }
        list.insertBefore(el, after);
      }
      activate(el);
    }

    function onEvents(data, ws) {
      var events = data.events || [];
      for (var i = 0; i < events.length; i++) {
        var ev = events[i];
        if (ev.seq > lastSeq + 1) {
          // A gap: something between was not delivered. Ask again from what we have.
          ws.send(JSON.stringify({ kind: "resync", after: lastSeq }));
          return;
        }
        place(ev.seq, fragment(ev.html));
        if (ev.seq > lastSeq) lastSeq = ev.seq;
        if (ev.type === "model_called" || ev.type.indexOf("run_") === 0) {
          preview.hidden = true;
          previewText.textContent = "";
          previewNode = null;
        }
      }
      root.dataset.lastSeq = String(lastSeq);
      if (events.length) document.dispatchEvent(new CustomEvent("agentweb:events", { detail: { lastSeq: lastSeq } }));
    }

    function onState(data) {
      var header = document.getElementById("run-header");
      if (header && data.header) {
        header.replaceChildren(fragment(data.header));
        activate(header);
      }
      var slots = data.approvals || {};
      list.querySelectorAll(".approval-slot").forEach(function (slot) {
        var html = slots[slot.dataset.callId];
        if (html === undefined) return;
        var next = fragment(html);
        var before = slot.querySelector(".approval");
        var after = next.querySelector(".approval");
        // Still pending on both sides: keep the controls as they are, with whatever a
        // person has opened or typed in them.
        if (before && after && before.id === after.id &&
            before.classList.contains("approval-pending") && after.classList.contains("approval-pending")) return;
        slot.replaceChildren(next);
        activate(slot);
      });
      root.dataset.status = data.status;
      if (!data.active) {
        preview.hidden = true;
        if (note) note.textContent = "";
        if (data.last_seq <= lastSeq) socket.stop();
        setConn("done");
      } else if (note) {
        note.textContent = "Following live.";
      }
    }

    socket = new LiveSocket(
      function () {
        return "/ws/runs/" + runId + "/?after=" + lastSeq;
      },
      {
        message: function (data, ws) {
          if (data.kind === "events") onEvents(data, ws);
          else if (data.kind === "state") onState(data);
          else if (data.kind === "tree") {
            var tree = document.getElementById("run-tree");
            if (tree) tree.replaceWith(fragment(data.html)); // escaped server-side fragment
          }
          else if (data.kind === "delta") showDelta(data);
        },
      }
    );
    window.agentwebRun = {
      lastSeq: function () {
        return lastSeq;
      },
      socket: socket,
    };
  }

  /* --- run status badges (runs list, tickets) ------------------------------------------ */
  function runStatuses() {
    var badges = document.querySelectorAll("[data-run-status]");
    if (!badges.length || document.getElementById("run-page")) return;
    new LiveSocket(
      function () {
        return "/ws/runs/";
      },
      {
        message: function (data) {
          if (data.kind !== "status") return;
          var seen = false;
          document.querySelectorAll("[data-run-status]").forEach(function (el) {
            if (el.dataset.runStatus !== String(data.run)) return;
            seen = true;
            el.className = el.className.replace(/\bstatus-\S+/g, "").trim() + " status-" + (data.outcome || data.status);
            if (data.outcome) el.title = "It succeeded, but an action was rejected, failed or expired: look at it";
            else el.removeAttribute("title");
            var label = el.querySelector("[data-label]") || el;
            if (label === el && el.dataset.prefix !== undefined) {
              el.textContent = el.dataset.prefix + data.label;
            } else {
              label.textContent = data.label;
            }
          });
          if (!seen) {
            var banner = document.getElementById("new-runs");
            if (banner) banner.hidden = false;
          }
        },
      }
    );
  }

  /* --- pending approvals count (every page) -------------------------------------------- */
  function approvalsCount() {
    var badge = document.getElementById("nav-pending");
    if (!badge) return;
    var first = true; // the page was just rendered with this count: no refresh for it
    new LiveSocket(
      function () {
        return "/ws/approvals/";
      },
      {
        message: function (data) {
          if (data.kind !== "approvals") return;
          badge.textContent = String(data.pending);
          badge.classList.toggle("zero", !data.pending);
          if (first && String(data.pending) === badge.dataset.rendered) {
            first = false;
            return;
          }
          first = false;
          document.body.dispatchEvent(new CustomEvent("approvals-changed", { bubbles: true }));
        },
      }
    );
  }


  /* --- ticket pages: the list and one ticket, fetched again when a ticket changes ------ */
  function ticketsLive() {
    var root = document.querySelector("[data-live-tickets]");
    if (!root || !window.htmx) return;
    var ticketId = root.dataset.liveTickets;
    var timer = null;
    var busy = false;
    var again = false;
    var last = 0;
    function refresh() {
      var el = document.querySelector("[data-live-tickets]");
      if (!el) return;
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      last = Date.now();
      // What the person picked in the start form survives the new rendering.
      var picker = document.getElementById("id_start_agent");
      var picked = picker && picker.dataset.touched ? picker.value : null;
      window.htmx
        .ajax("GET", location.pathname + location.search, {
          target: "#" + el.id,
          swap: "outerHTML",
          headers: { "X-Agentweb-Refresh": "1" },
        })
        .then(function () {
          busy = false;
          var p = document.getElementById("id_start_agent");
          if (p && picked !== null) {
            p.value = picked;
            p.dataset.touched = "1";
          }
          document.body.dispatchEvent(new CustomEvent("tickets-refreshed", { bubbles: true }));
          if (again) {
            again = false;
            schedule();
          }
        }, function () {
          busy = false;
        });
    }
    function schedule() {
      if (timer) return;
      // At most one new rendering a second, however many tickets arrive.
      var wait = Math.max(150, 1000 - (Date.now() - last));
      timer = setTimeout(function () {
        timer = null;
        refresh();
      }, wait);
    }
    document.addEventListener("change", function (ev) {
      if (ev.target && ev.target.id === "id_start_agent") ev.target.dataset.touched = "1";
    });
    new LiveSocket(
      function () {
        return "/ws/tickets/" + (ticketId && ticketId !== "0" ? "?ticket=" + ticketId : "");
      },
      {
        message: function (data) {
          if (data.kind === "ticket") schedule();
        },
      }
    );
  }

  /* --- elapsed clocks ------------------------------------------------------------------- */
  function fmt(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 1) return "<1s";
    if (seconds < 60) return seconds + "s";
    if (seconds < 3600) return Math.floor(seconds / 60) + "m " + String(seconds % 60).padStart(2, "0") + "s";
    return Math.floor(seconds / 3600) + "h " + String(Math.floor((seconds % 3600) / 60)).padStart(2, "0") + "m";
  }
  function tick() {
    document.querySelectorAll("[data-elapsed]").forEach(function (el) {
      if (el.dataset.end || !el.dataset.start) return;
      var status = (document.getElementById("run-page") || {}).dataset;
      if (status && status.status === "queued") return;
      var start = Date.parse(el.dataset.start);
      if (!isNaN(start)) el.textContent = fmt((Date.now() - start) / 1000);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("run-page");
    if (root) runPage(root);
    runStatuses();
    approvalsCount();
    ticketsLive();
    setInterval(tick, 1000);
  });
})();
