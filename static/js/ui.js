/* Small page behaviours: menus, confirmations, copy buttons, the approvals inbox keys. */
(function () {
  "use strict";

  // A button with data-toggle="<selector>" opens/closes that element (class "open").
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest("[data-toggle]");
    document.querySelectorAll(".open[data-menu]").forEach(function (el) {
      if (!el.contains(ev.target)) close(el);
    });
    if (!button) return;
    var target = document.querySelector(button.dataset.toggle);
    if (!target) return;
    var open = !target.classList.contains("open");
    target.classList.toggle("open", open);
    target.setAttribute("data-menu", "");
    button.setAttribute("aria-expanded", String(open));
  });
  function close(el) {
    el.classList.remove("open");
    el.querySelectorAll("[aria-expanded]").forEach(function (b) { b.setAttribute("aria-expanded", "false"); });
    var own = document.querySelector('[data-toggle="#' + el.id + '"]');
    if (own) own.setAttribute("aria-expanded", "false");
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") document.querySelectorAll(".open[data-menu]").forEach(close);
  });

  // <input data-select-on-focus> selects its text (no inline handlers: the CSP forbids them).
  document.addEventListener("focusin", function (ev) {
    if (ev.target.matches && ev.target.matches("input[data-select-on-focus]")) ev.target.select();
  });
  // <form data-confirm="question"> asks before it submits.
  document.addEventListener("submit", function (ev) {
    var form = ev.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) {
      ev.preventDefault();
      ev.stopImmediatePropagation();
    }
  }, true);

  // <button data-copy="#input"> copies that input's value.
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest("[data-copy]");
    if (!button) return;
    var input = document.querySelector(button.dataset.copy);
    if (!input) return;
    input.select();
    var done = function () { button.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand("copy"); done(); });
    } else {
      document.execCommand("copy");
      done();
    }
  });

  /* Approvals inbox: j/k move, a approves, e opens the edit form, r rejects (asks for a
     reason). A high-risk call is never one keystroke: "a" asks to confirm first (Enter
     or "Yes, approve" confirms, Esc or "Not yet" does not). Keys are ignored while typing
     in a field. */
  function inboxItems() {
    return Array.prototype.slice.call(document.querySelectorAll("#inbox .inbox-item"));
  }
  function current() {
    return document.querySelector("#inbox .inbox-item.selected");
  }
  function select(item) {
    inboxItems().forEach(function (el) { el.classList.toggle("selected", el === item); el.removeAttribute("aria-current"); });
    if (item) {
      item.setAttribute("aria-current", "true");
      item.scrollIntoView({ block: "nearest" });
    }
  }
  function askToConfirm(item) {
    var box = item.querySelector(".confirm-approve");
    if (!box) return false;
    box.hidden = false;
    var yes = box.querySelector("[data-confirm-approve]");
    if (yes) yes.focus();
    return true;
  }
  function closeConfirm(box) {
    box.hidden = true;
    var item = box.closest(".inbox-item");
    if (item) item.focus({ preventScroll: true });
  }
  document.addEventListener("click", function (ev) {
    var no = ev.target.closest("[data-cancel-approve]");
    if (no) closeConfirm(no.closest(".confirm-approve"));
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "Escape") return;
    document.querySelectorAll(".confirm-approve:not([hidden])").forEach(closeConfirm);
  });
  function firstField(box) {
    return box.querySelector(".arg-fields textarea, .arg-fields input, .arg-fields select, textarea");
  }
  document.addEventListener("keydown", function (ev) {
    if (!document.getElementById("inbox")) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var tag = (ev.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || tag === "select" || ev.target.isContentEditable) return;
    var items = inboxItems();
    if (!items.length) return;
    var item = current();
    var index = item ? items.indexOf(item) : -1;
    if (ev.key === "j") { select(items[Math.min(items.length - 1, index + 1)]); ev.preventDefault(); return; }
    if (ev.key === "k") { select(items[Math.max(0, index - 1)]); ev.preventDefault(); return; }
    if (!item) return;
    if (ev.key === "a") {
      var approve = item.querySelector("button[data-approve]");
      if (!approve) return;
      ev.preventDefault();
      if (item.dataset.risk === "high") {
        askToConfirm(item);
      } else {
        approve.click();
      }
    } else if (ev.key === "e") {
      var edit = item.querySelector("details.edit");
      if (edit) {
        edit.open = true;
        var field = firstField(edit);
        if (field) field.focus();
        ev.preventDefault();
      }
    } else if (ev.key === "r") {
      var reject = item.querySelector("details.reject");
      if (reject) {
        reject.open = true;
        var reason = reject.querySelector("textarea, input[name=comment]");
        if (reason) reason.focus();
        ev.preventDefault();
      }
    }
  });
  // The list is re-rendered by htmx when approvals change: keep the selection by id, and
  // the edit and reject boxes someone has open stay open with what they typed.
  var selectedId = null;
  var openBoxes = [];
  function valuesIn(box) {
    var values = {};
    box.querySelectorAll("textarea[name], input[name], select[name]").forEach(function (el) {
      if (el.type === "hidden" || el.type === "submit") return;
      values[el.name] = el.type === "checkbox" ? el.checked : el.value;
    });
    return values;
  }
  document.addEventListener("htmx:beforeSwap", function () {
    var item = current();
    selectedId = item ? item.id : null;
    openBoxes = Array.prototype.map.call(
      document.querySelectorAll("#inbox details[open]"),
      function (d) {
        return { item: d.closest(".inbox-item").id, cls: d.className, values: valuesIn(d) };
      }
    );
  });
  document.addEventListener("htmx:afterSettle", function () {
    openBoxes.forEach(function (box) {
      var d = document.querySelector("#" + box.item + " details." + box.cls.split(" ").join("."));
      if (!d) return;
      d.open = true;
      d.querySelectorAll("textarea[name], input[name], select[name]").forEach(function (el) {
        if (!(el.name in box.values) || el.type === "hidden") return;
        if (el.type === "checkbox") el.checked = box.values[el.name];
        else el.value = box.values[el.name];
      });
    });
    openBoxes = [];
    if (!selectedId) return;
    var item = document.getElementById(selectedId);
    if (item) select(item);
    else {
      var first = inboxItems()[0];
      if (first) select(first);
    }
  });

  /* The final answer is shown once: when it arrives live, the model turn that wrote it
     says so instead of repeating it (the server renders it that way on a reload). */
  document.addEventListener("agentweb:events", function () {
    var finals = document.querySelectorAll("#timeline .ev-run_finished .final");
    if (!finals.length) return;
    var answer = finals[finals.length - 1].textContent.trim();
    var turns = document.querySelectorAll("#timeline .ev-model_called");
    if (!turns.length) return;
    var thought = turns[turns.length - 1].querySelector(".thought");
    if (!thought || thought.textContent.trim() !== answer) return;
    var ref = document.createElement("div");
    ref.className = "muted small final-ref";
    ref.textContent = "Wrote the final answer (below).";
    thought.replaceWith(ref);
  });
})();
