// Runway's console and MCP Apps view: one script. Both speak MCP, the console over HTTP with
// the person's token, the view through its host's bridge; both read and act on Runs only
// through Runway's tools, so they show and do exactly what the caller may over MCP.
(function () {
  "use strict";

  var PROTOCOL_VERSION = "2026-07-28";
  var TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
  var APPS_PROTOCOL_VERSION = "2026-01-26";
  var TOOLS = {
    list: "runway_list_runs",
    get: "runway_get_run",
    answer: "runway_answer_run",
    cancel: "runway_cancel_run",
  };
  var TERMINAL = { Succeeded: true, Failed: true, Cancelled: true };
  var PHASES = ["Pending", "Queued", "Running", "Waiting", "Cancelling", "Succeeded", "Failed", "Cancelled"];

  // ---- DOM ---------------------------------------------------------------------------------

  /** An element; text children become text nodes (never markup). */
  function h(tag, attrs) {
    var el = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (v === undefined || v === null || v === false) return;
      if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else if (k === "value") el.value = v;
      else if (k === "checked") el.checked = !!v;
      else el.setAttribute(k, v === true ? "" : String(v));
    });
    for (var i = 2; i < arguments.length; i++) append(el, arguments[i]);
    return el;
  }

  function append(el, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) child.forEach(function (c) { append(el, c); });
    else el.append(child instanceof Node ? child : String(child));
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  function when(iso) {
    if (!iso) return "";
    var d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleString();
  }

  function duration(from, to) {
    if (!from) return "";
    var ms = (to ? new Date(to) : new Date()) - new Date(from);
    if (!(ms >= 0)) return "";
    if (ms < 1000) return ms + " ms";
    var s = Math.round(ms / 1000);
    if (s < 60) return s + " s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + " min " + (s % 60) + " s";
    return Math.floor(m / 60) + " h " + (m % 60) + " min";
  }

  function json(v) {
    return JSON.stringify(v, null, 2);
  }

  function phaseBadge(phase) {
    return h("span", { class: "phase phase-" + String(phase || "").toLowerCase(), "data-phase": phase }, phase);
  }

  // ---- MCP ---------------------------------------------------------------------------------

  function McpError(code, message, data) {
    this.code = code;
    this.message = message;
    this.data = data;
  }
  McpError.prototype = Object.create(Error.prototype);

  /** A tool result's structured content, or an error for a tool error. */
  function toolResult(r) {
    if (r && r.isError) {
      var text = (r.content || []).map(function (c) { return c.text || ""; }).join(" ");
      throw new McpError(0, text || "the tool failed");
    }
    return (r && r.structuredContent) || {};
  }

  /** MCP over HTTP to this server, as the signed-in person. */
  function httpTransport(token, namespace) {
    var nextId = 1;
    var url = "/namespaces/" + encodeURIComponent(namespace) + "/mcp";
    function headers(method, name) {
      var hd = {
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
        "Mcp-Method": method,
      };
      if (name) hd["Mcp-Name"] = name;
      if (token) hd.Authorization = "Bearer " + token;
      return hd;
    }
    function body(method, params) {
      var p = Object.assign({}, params);
      p._meta = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS_EXTENSION]: {} } },
      };
      return JSON.stringify({ jsonrpc: "2.0", id: nextId++, method: method, params: p });
    }
    function rpc(method, params, name) {
      return fetch(url, { method: "POST", headers: headers(method, name), body: body(method, params) })
        .then(function (res) {
          return res.text().then(function (text) {
            var msg;
            try { msg = JSON.parse(text); } catch (e) { throw new McpError(res.status, "HTTP " + res.status); }
            if (msg.error) throw new McpError(msg.error.code, msg.error.message, msg.error.data);
            return msg.result;
          });
        });
    }
    return {
      callTool: function (name, args) {
        return rpc("tools/call", { name: name, arguments: args }, name).then(toolResult);
      },
      /** Follow `taskIds` with subscriptions/listen; `onChange` on every task notification. */
      listen: function (taskIds, onChange) {
        var stopped = false;
        var controller = new AbortController();
        function open() {
          if (stopped || !taskIds.length) return;
          fetch(url, {
            method: "POST",
            headers: headers("subscriptions/listen"),
            body: body("subscriptions/listen", { notifications: { taskIds: taskIds } }),
            signal: controller.signal,
          }).then(function (res) {
            if (!res.ok || !res.body) throw new Error("listen refused: HTTP " + res.status);
            var reader = res.body.getReader();
            var decoder = new TextDecoder();
            var buffer = "";
            function pump() {
              return reader.read().then(function (chunk) {
                if (chunk.done) return;
                buffer += decoder.decode(chunk.value, { stream: true });
                var frames = buffer.split("\n\n");
                buffer = frames.pop();
                frames.forEach(function (frame) {
                  var data = frame.split("\n").filter(function (l) { return l.indexOf("data:") === 0; })
                    .map(function (l) { return l.slice(5).trim(); }).join("");
                  if (!data) return;
                  try {
                    var msg = JSON.parse(data);
                    if (msg.method === "notifications/tasks") onChange(msg.params);
                  } catch (e) { /* a keep-alive or a partial frame */ }
                });
                return pump();
              });
            }
            return pump();
          }).catch(function () { /* reopened below */ }).then(function () {
            if (!stopped) setTimeout(open, 2000);
          });
        }
        open();
        return function stop() { stopped = true; controller.abort(); };
      },
    };
  }

  /** MCP through an MCP Apps host (postMessage JSON-RPC to the parent window). */
  function bridgeTransport(handlers) {
    var nextId = 1;
    var pending = {};
    var target = window.parent;
    window.addEventListener("message", function (event) {
      if (event.source !== target) return;
      var msg = event.data;
      if (!msg || msg.jsonrpc !== "2.0") return;
      if (msg.id !== undefined && pending[msg.id] && !msg.method) {
        var p = pending[msg.id];
        delete pending[msg.id];
        if (msg.error) p.reject(new McpError(msg.error.code, msg.error.message, msg.error.data));
        else p.resolve(msg.result);
        return;
      }
      if (msg.method && handlers[msg.method]) {
        var out = handlers[msg.method](msg.params || {});
        if (msg.id !== undefined) target.postMessage({ jsonrpc: "2.0", id: msg.id, result: out || {} }, "*");
      } else if (msg.method && msg.id !== undefined) {
        target.postMessage({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } }, "*");
      }
    });
    function request(method, params) {
      var id = nextId++;
      return new Promise(function (resolve, reject) {
        pending[id] = { resolve: resolve, reject: reject };
        target.postMessage({ jsonrpc: "2.0", id: id, method: method, params: params }, "*");
      });
    }
    function notify(method, params) {
      target.postMessage({ jsonrpc: "2.0", method: method, params: params }, "*");
    }
    return {
      request: request,
      notify: notify,
      callTool: function (name, args) {
        return request("tools/call", { name: name, arguments: args }).then(toolResult);
      },
      listen: null,
    };
  }

  // ---- Answer forms --------------------------------------------------------------------------

  function choices(prop) {
    if (Array.isArray(prop.enum)) {
      return prop.enum.map(function (v, i) {
        return { value: v, title: (prop.enumNames && prop.enumNames[i]) || String(v) };
      });
    }
    var alts = prop.oneOf || prop.anyOf;
    if (Array.isArray(alts) && alts.every(function (a) { return a && a.const !== undefined; })) {
      return alts.map(function (a) { return { value: a.const, title: a.title || String(a.const) }; });
    }
    return null;
  }

  var INPUT_TYPES = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

  /** One field of a form: its element and a reader that returns {value} or {error}. */
  function field(name, prop, required, id) {
    var label = prop.title || name;
    var help = prop.description ? h("small", { class: "help" }, prop.description) : null;
    var options = choices(prop);
    var itemOptions = prop.type === "array" && prop.items ? choices(prop.items) : null;
    var control;
    var read;
    if (prop.type === "boolean") {
      control = h("input", { type: "checkbox", id: id, name: name, checked: prop.default === true });
      read = function () { return { value: control.checked }; };
      return {
        el: h("div", { class: "field field-boolean" }, h("label", { for: id }, control, " ", label), help),
        read: read,
      };
    }
    if (itemOptions) {
      var boxes = itemOptions.map(function (o, i) {
        return h("input", { type: "checkbox", id: id + "-" + i, value: String(i) });
      });
      control = h("div", { class: "choices", id: id },
        itemOptions.map(function (o, i) { return h("label", { for: id + "-" + i }, boxes[i], " ", o.title); }));
      read = function () {
        var picked = itemOptions.filter(function (o, i) { return boxes[i].checked; }).map(function (o) { return o.value; });
        if (prop.minItems && picked.length < prop.minItems) return { error: "pick at least " + prop.minItems };
        if (prop.maxItems && picked.length > prop.maxItems) return { error: "pick at most " + prop.maxItems };
        if (!picked.length && !required) return {};
        return { value: picked };
      };
    } else if (options) {
      control = h("select", { id: id, name: name },
        required ? null : h("option", { value: "" }, "—"),
        options.map(function (o, i) { return h("option", { value: String(i) }, o.title); }));
      if (required && prop.default === undefined) control.insertBefore(h("option", { value: "", selected: true }, "choose…"), control.firstChild);
      read = function () {
        if (control.value === "") return required ? { error: "required" } : {};
        return { value: options[Number(control.value)].value };
      };
    } else if (prop.type === "number" || prop.type === "integer") {
      control = h("input", {
        type: "number", id: id, name: name, min: prop.minimum, max: prop.maximum,
        step: prop.type === "integer" ? 1 : "any", value: prop.default,
      });
      read = function () {
        if (control.value === "") return required ? { error: "required" } : {};
        var n = Number(control.value);
        if (!isFinite(n)) return { error: "not a number" };
        if (prop.type === "integer" && !Number.isInteger(n)) return { error: "must be a whole number" };
        if (prop.minimum !== undefined && n < prop.minimum) return { error: "must be at least " + prop.minimum };
        if (prop.maximum !== undefined && n > prop.maximum) return { error: "must be at most " + prop.maximum };
        return { value: n };
      };
    } else {
      var long = prop.maxLength === undefined || prop.maxLength > 200;
      control = long && !INPUT_TYPES[prop.format]
        ? h("textarea", { id: id, name: name, rows: 2, maxlength: prop.maxLength })
        : h("input", { type: INPUT_TYPES[prop.format] || "text", id: id, name: name, maxlength: prop.maxLength });
      if (prop.default !== undefined) control.value = prop.default;
      read = function () {
        var v = control.value;
        if (v === "") return required ? { error: "required" } : {};
        if (prop.minLength && v.length < prop.minLength) return { error: "at least " + prop.minLength + " characters" };
        if (prop.maxLength && v.length > prop.maxLength) return { error: "at most " + prop.maxLength + " characters" };
        if (prop.pattern && !new RegExp(prop.pattern).test(v)) return { error: "does not match " + prop.pattern };
        if (prop.format === "date-time") v = new Date(v).toISOString();
        return { value: v };
      };
    }
    return {
      el: h("div", { class: "field" },
        h("label", { for: id }, label, required ? h("span", { class: "required", title: "required" }, " *") : null),
        control, help),
      read: read,
    };
  }

  /** A form for one open question, built from its requestedSchema. */
  function answerForm(question, onAnswer) {
    var schema = question.requestedSchema || { properties: {} };
    var props = schema.properties || {};
    var required = schema.required || [];
    var fields = Object.keys(props).map(function (name, i) {
      var f = field(name, props[name] || {}, required.indexOf(name) >= 0, "q-" + question.key + "-" + i);
      f.name = name;
      f.error = h("div", { class: "error", role: "alert" });
      f.el.append(f.error);
      return f;
    });
    var status = h("div", { class: "form-status", role: "status" });
    var form = h("form", { class: "answer", "data-key": question.key, novalidate: true },
      question.message ? h("p", { class: "question" }, question.message) : null,
      fields.map(function (f) { return f.el; }),
      h("div", { class: "actions" },
        // A click, not a form submission: sandboxed views may not be allowed to submit forms.
        h("button", { type: "button", class: "primary submit", onclick: function () { submit(); } }, "Submit"),
        h("button", { type: "button", class: "decline", onclick: function () { send({ action: "decline" }); } }, "Decline")),
      status);
    function send(response) {
      status.textContent = "sending…";
      Array.prototype.forEach.call(form.querySelectorAll("button"), function (b) { b.disabled = true; });
      onAnswer(response).then(function () { status.textContent = "answer recorded"; }, function (e) {
        status.textContent = e.message;
        status.className = "form-status error";
        Array.prototype.forEach.call(form.querySelectorAll("button"), function (b) { b.disabled = false; });
      });
    }
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      submit();
    });
    function submit() {
      var content = {};
      var ok = true;
      fields.forEach(function (f) {
        var r = f.read();
        f.error.textContent = r.error ? (f.name + ": " + r.error) : "";
        if (r.error) ok = false;
        else if (r.value !== undefined) content[f.name] = r.value;
      });
      if (ok) send({ action: "accept", content: content });
    }
    return form;
  }

  // ---- A Run in full ------------------------------------------------------------------------

  function section(title, body, cls) {
    return h("section", { class: cls || "" }, h("h3", {}, title), body);
  }

  /** An item of a `forEach` step (`deploy[2]`): shown under its step, not counted as one. */
  function isItem(name) {
    return /\[\d+\]$/.test(name || "");
  }

  function stepRows(run) {
    var rows = [];
    // Items follow their step, whenever they started.
    var itemsOf = {};
    (run.steps || []).forEach(function (s) {
      var m = /^(.*)\[\d+\]$/.exec(s.name || "");
      if (m) (itemsOf[m[1]] = itemsOf[m[1]] || []).push(s);
    });
    var ordered = [];
    (run.steps || []).forEach(function (s) {
      if (isItem(s.name)) return;
      ordered.push(s);
      (itemsOf[s.name] || []).forEach(function (i) { ordered.push(i); });
    });
    ordered.forEach(function (s) {
      var item = isItem(s.name);
      rows.push(h("tr", { "data-step": s.name, class: item ? "item" : "" },
        h("td", {}, item ? "↳ " + s.name : s.name, s.finally ? h("span", { class: "tag" }, "finally") : null,
          s.items ? h("span", { class: "tag" }, s.items.length + " items") : null),
        h("td", {}, phaseBadge(s.phase)),
        h("td", {}, String(s.attempt || 1)),
        h("td", {}, when(s.startedAt)),
        h("td", {}, duration(s.startedAt, s.finishedAt)),
        h("td", {}, s.message || "",
          s.childRun ? h("div", {}, "child run ", h("code", {}, s.childRun)) : null,
          s.output !== undefined ? h("details", {}, h("summary", {}, "output"), h("pre", {}, json(s.output))) : null)));
      (s.attempts || []).forEach(function (a) {
        rows.push(h("tr", { class: "attempt" },
          h("td", {}, "↳ attempt " + a.attempt), h("td", {}, phaseBadge("Failed")), h("td", {}, String(a.attempt)),
          h("td", {}, when(a.startedAt)), h("td", {}, duration(a.startedAt, a.finishedAt)), h("td", {}, a.message || "")));
      });
    });
    var started = {};
    (run.steps || []).forEach(function (s) { started[s.name] = true; });
    (run.plannedSteps || []).forEach(function (name) {
      if (!started[name]) rows.push(h("tr", { class: "planned", "data-step": name },
        h("td", {}, name), h("td", {}, h("span", { class: "phase" }, "not started")), h("td", {}), h("td", {}), h("td", {}), h("td", {})));
    });
    return rows;
  }

  function resultView(run) {
    if (run.error) return h("pre", { class: "error" }, run.error.message || json(run.error));
    if (!run.result) return null;
    var text = (run.result.content || []).map(function (c) { return c.text || json(c); }).join("\n");
    return h("div", {},
      text ? h("pre", { class: run.result.isError ? "error" : "" }, text) : null,
      run.result.structuredContent ? h("details", {}, h("summary", {}, "structured content"), h("pre", {}, json(run.result.structuredContent))) : null);
  }

  /** Render `run` (the runway_get_run answer) into `root`; actions go through `client`. */
  function renderRun(root, run, client, refresh) {
    clear(root);
    var done = TERMINAL[run.phase];
    var planned = (run.plannedSteps || []).length;
    var finished = (run.steps || []).filter(function (s) { return !isItem(s.name) && (!s.finally && TERMINAL[s.phase] || s.phase === "Skipped"); }).length;
    var asked = run.questions || [];
    var mine = asked.filter(function (q) { return q.awaitingYou && q.form; });
    var others = asked.filter(function (q) { return !(q.awaitingYou && q.form); });
    var cancelStatus = h("span", { class: "form-status", role: "status" });
    append(root, [
      h("header", { class: "run-head" },
        h("h2", {}, run.title || run.workflow, " ", phaseBadge(run.phase)),
        h("div", { class: "task-id" }, "task ", h("code", {}, run.taskId)),
        run.statusMessage ? h("p", { class: "status-message" }, run.statusMessage) : null,
        planned ? h("progress", { max: planned, value: done ? planned : Math.min(finished, planned), title: finished + " of " + planned + " steps" }) : null,
        done || !run.youMayCancel ? null : h("div", { class: "actions" },
          h("button", {
            type: "button", class: "cancel",
            onclick: function (e) {
              e.target.disabled = true;
              cancelStatus.textContent = "cancelling…";
              client.callTool(TOOLS.cancel, { taskId: run.taskId, reason: "cancelled in the Runway console" })
                .then(function () { cancelStatus.textContent = "cancel requested"; refresh(); },
                  function (err) { cancelStatus.textContent = err.message; e.target.disabled = false; });
            },
          }, "Cancel run"), " ", cancelStatus)),
      h("dl", { class: "facts" },
        h("dt", {}, "Requested by"), h("dd", {}, run.requestedBy ? run.requestedBy.username : "—"),
        h("dt", {}, "Created"), h("dd", {}, when(run.createdAt)),
        h("dt", {}, "Duration"), h("dd", {}, duration(run.startedAt || run.createdAt, run.finishedAt)),
        run.cancel ? [h("dt", {}, "Cancelled by"), h("dd", { class: "cancelled-by" }, (run.cancel.requestedBy || "?") + " at " + when(run.cancel.requestedAt) + (run.cancel.reason ? " (" + run.cancel.reason + ")" : ""))] : null),
      mine.length ? section("Waiting for your answer", mine.map(function (q) {
        return answerForm(q, function (response) {
          var responses = {};
          responses[q.key] = response;
          return client.callTool(TOOLS.answer, { taskId: run.taskId, inputResponses: responses }).then(refresh);
        });
      }), "questions") : null,
      others.length ? section("Open questions", h("ul", {}, others.map(function (q) {
        return h("li", {}, h("code", {}, q.key), " ", q.message || q.method,
          q.form ? " — waiting for someone else's answer" : " — asked of the calling agent");
      }))) : null,
      (run.result || run.error) ? section("Result", resultView(run), "result") : null,
      section("Steps", h("table", { class: "steps" },
        h("thead", {}, h("tr", {}, ["Step", "Phase", "Attempt", "Started", "Duration", "Detail"].map(function (c) { return h("th", {}, c); }))),
        h("tbody", {}, stepRows(run)))),
      (run.answers || []).length ? section("Answers", h("ul", { class: "answers" }, run.answers.map(function (a) {
        return h("li", {}, h("code", {}, a.key), " ", a.action, " by ", h("strong", {}, a.answeredBy || "?"), " at ", when(a.answeredAt),
          a.content ? h("details", {}, h("summary", {}, "content"), h("pre", {}, json(a.content))) : null);
      }))) : null,
      (run.notes || []).length ? section("Notes", h("ul", {}, run.notes.map(function (n) {
        return h("li", {}, h("code", {}, n.key), " ", n.message, n.answeredBy ? " (" + n.answeredBy + ")" : "");
      }))) : null,
      "arguments" in run ? section("Arguments", h("pre", { class: "arguments" }, json(run.arguments || {}))) : null,
      Array.isArray(run.events) ? section("Events", run.events.length ? h("table", { class: "events" },
        h("tbody", {}, run.events.map(function (e) {
          return h("tr", { class: e.type === "Warning" ? "warning" : "" },
            h("td", {}, when(e.time)), h("td", {}, e.type), h("td", {}, e.reason), h("td", {}, e.message));
        }))) : h("p", {}, "no events")) : null,
    ]);
  }

  /** Keeps one Run on screen up to date: listen where the transport can, else poll. */
  function RunPanel(root, client, taskId) {
    var stopListen = null;
    var timer = null;
    var stopped = false;
    var last = null;
    function refresh() {
      if (stopped) return Promise.resolve();
      return client.callTool(TOOLS.get, { taskId: taskId }).then(function (run) {
        if (stopped) return;
        var key = json(run);
        // Keep what a person is typing while the question they are answering stays open.
        var editing = root.querySelector("form.answer:focus-within");
        var typing = editing && (run.questions || []).some(function (q) {
          return q.key === editing.getAttribute("data-key") && q.awaitingYou;
        });
        if (key !== last && !typing) {
          last = key;
          renderRun(root, run, client, refresh);
        }
        if (TERMINAL[run.phase] && !typing) stop(true);
      }, function (e) {
        // Gone, or never readable by this caller: say so once and stop asking.
        stop(false);
        clear(root).append(h("p", { class: "error" }, e.message));
      });
    }
    function stop(keep) {
      if (stopListen) stopListen();
      stopListen = null;
      clearInterval(timer);
      if (!keep) stopped = true;
    }
    if (client.listen) stopListen = client.listen([taskId], refresh);
    // Also a slow poll: the stream may be refused (e.g. no `watch runs`) or be reconnecting.
    timer = setInterval(refresh, client.listen ? 5000 : 1500);
    refresh();
    return { refresh: refresh, stop: stop };
  }

  // ---- Runs list ----------------------------------------------------------------------------

  function renderList(root, page, onOpen) {
    clear(root);
    if (!page.runs.length) {
      root.append(h("p", { class: "empty" }, "No runs to show."));
      return;
    }
    root.append(h("table", { class: "runs" },
      h("thead", {}, h("tr", {}, ["Run", "Workflow", "Phase", "Status", "Requested by", "Created"].map(function (c) { return h("th", {}, c); }))),
      h("tbody", {}, page.runs.map(function (r) {
        return h("tr", { "data-task": r.taskId, class: r.awaitingYou.length ? "awaiting" : "" },
          h("td", {}, h("a", { href: "#", onclick: function (e) { e.preventDefault(); onOpen(r.taskId); } }, r.taskId),
            r.awaitingYou.length ? h("span", { class: "tag you" }, "your answer") : null),
          h("td", {}, r.workflow), h("td", {}, phaseBadge(r.phase)), h("td", {}, r.statusMessage || ""),
          h("td", {}, r.requestedBy || ""), h("td", {}, when(r.createdAt)));
      }))));
  }

  // ---- The console --------------------------------------------------------------------------

  var TOKEN_KEY = "runway.token";

  function bootConsole(root) {
    var token = sessionStorage.getItem(TOKEN_KEY) || "";
    var state = { namespace: null, filters: {}, cursors: [null], page: 0, panel: null, listTimer: null, listStop: null };
    var whoEl = h("span", { class: "who" });
    var nsSelect = h("select", { id: "namespace", "aria-label": "namespace" });
    var signOut = h("button", { type: "button", onclick: function () { sessionStorage.removeItem(TOKEN_KEY); location.hash = ""; location.reload(); } }, "Sign out");
    var listEl = h("div", { class: "list", id: "runs" });
    var detailEl = h("div", { class: "detail", id: "run" });
    var pager = h("div", { class: "pager" });
    var notice = h("div", { class: "notice", role: "status" });
    var client = null;

    function signIn(message) {
      var input = h("input", { type: "password", id: "token", autocomplete: "off", placeholder: "bearer token" });
      clear(root).append(h("form", { class: "sign-in", onsubmit: function (e) {
        e.preventDefault();
        token = input.value.trim();
        sessionStorage.setItem(TOKEN_KEY, token);
        start();
      } }, h("h1", {}, "Runway"), h("label", { for: "token" }, "Token"), input,
      h("button", { type: "submit", class: "primary" }, "Sign in"),
      message ? h("p", { class: "error", role: "alert" }, message) : null));
      input.focus();
    }

    function start() {
      var hd = token ? { Authorization: "Bearer " + token } : {};
      fetch("/ui/api/namespaces", { headers: hd }).then(function (res) {
        if (res.status === 401) { sessionStorage.removeItem(TOKEN_KEY); signIn(token ? "That token was not accepted." : null); return null; }
        if (!res.ok) throw new Error("the server answered " + res.status);
        return res.json();
      }).then(function (me) { if (me) shell(me); }, function (e) { signIn(e.message); });
    }

    function filters() {
      var wf = h("input", { type: "text", id: "filter-workflow", placeholder: "workflow" });
      var phase = h("select", { id: "filter-phase" }, h("option", { value: "" }, "any phase"),
        PHASES.map(function (p) { return h("option", { value: p }, p); }));
      var waiting = h("input", { type: "checkbox", id: "filter-waiting" });
      var mine = h("input", { type: "checkbox", id: "filter-mine" });
      function apply() {
        state.filters = {};
        if (wf.value.trim()) state.filters.workflow = wf.value.trim();
        if (phase.value) state.filters.phase = phase.value;
        if (waiting.checked) state.filters.waitingForMe = true;
        if (mine.checked) state.filters.requestedByMe = true;
        state.cursors = [null];
        state.page = 0;
        loadList();
      }
      [wf, phase, waiting, mine].forEach(function (el) { el.addEventListener("change", apply); });
      return h("div", { class: "filters" }, wf, phase,
        h("label", { for: "filter-waiting" }, waiting, " waiting for my answer"),
        h("label", { for: "filter-mine" }, mine, " requested by me"));
    }

    function shell(me) {
      clear(nsSelect);
      me.namespaces.forEach(function (ns) { nsSelect.append(h("option", { value: ns }, ns)); });
      whoEl.textContent = me.user;
      clear(root).append(
        h("header", { class: "top" }, h("h1", {}, "Runway"), h("label", { for: "namespace" }, "Namespace "), nsSelect,
          h("span", { class: "spacer" }), whoEl, " ", token ? signOut : null),
        notice,
        me.namespaces.length ? h("main", {},
          h("div", { class: "left" }, filters(), listEl, pager),
          detailEl) : h("p", { class: "empty" }, "You may not read Runs in any namespace."));
      if (!me.namespaces.length) return;
      var route = parseHash();
      var ns = me.namespaces.indexOf(route.namespace) >= 0 ? route.namespace : (me.namespace && me.namespaces.indexOf(me.namespace) >= 0 ? me.namespace : me.namespaces[0]);
      nsSelect.value = ns;
      nsSelect.addEventListener("change", function () { go(nsSelect.value, null); });
      window.addEventListener("hashchange", route_);
      go(ns, route.namespace === ns ? route.task : null);
    }

    function parseHash() {
      var m = /^#\/ns\/([^/]+)(?:\/run\/([^/]+))?$/.exec(location.hash);
      return m ? { namespace: decodeURIComponent(m[1]), task: m[2] ? decodeURIComponent(m[2]) : null } : {};
    }

    function route_() {
      var r = parseHash();
      if (!r.namespace) return;
      if (r.namespace !== state.namespace) { nsSelect.value = r.namespace; setNamespace(r.namespace); }
      openRun(r.task);
    }

    function go(ns, task) {
      var target = "#/ns/" + encodeURIComponent(ns) + (task ? "/run/" + encodeURIComponent(task) : "");
      if (location.hash === target) route_();
      else location.hash = target;
    }

    function setNamespace(ns) {
      state.namespace = ns;
      client = httpTransport(token, ns);
      state.cursors = [null];
      state.page = 0;
      if (state.listTimer) clearInterval(state.listTimer);
      state.listTimer = setInterval(function () { if (!document.hidden) loadList(); }, 2000);
      loadList();
    }

    function openRun(task) {
      if (state.panel) state.panel.stop();
      state.panel = null;
      clear(detailEl);
      if (!task) { detailEl.append(h("p", { class: "empty" }, "Choose a run.")); return; }
      state.panel = RunPanel(detailEl, client, task);
    }

    function loadList() {
      var args = Object.assign({ limit: 20 }, state.filters);
      var cursor = state.cursors[state.page];
      if (cursor) args.cursor = cursor;
      var ns = state.namespace;
      client.callTool(TOOLS.list, args).then(function (page) {
        if (ns !== state.namespace) return;
        notice.textContent = "";
        renderList(listEl, page, function (task) { go(state.namespace, task); });
        state.cursors[state.page + 1] = page.nextCursor || null;
        clear(pager).append(
          h("button", { type: "button", disabled: state.page === 0, onclick: function () { state.page--; loadList(); } }, "Newer"),
          h("span", {}, " page " + (state.page + 1) + " "),
          h("button", { type: "button", disabled: !page.nextCursor, onclick: function () { state.page++; loadList(); } }, "Older"));
        followList(page.runs);
      }, function (e) {
        notice.textContent = e.message;
      });
    }

    // Phases in the list change as soon as the Runs do, not only on the next poll.
    function followList(runs) {
      var live = runs.filter(function (r) { return !TERMINAL[r.phase]; }).map(function (r) { return r.taskId; }).sort();
      var key = live.join(",");
      if (key === state.listKey) return;
      state.listKey = key;
      if (state.listStop) state.listStop();
      state.listStop = live.length ? client.listen(live, function () { loadList(); }) : null;
    }

    if (!root) return;
    start();
  }

  // ---- The MCP Apps view --------------------------------------------------------------------

  function bootView(root) {
    var panel = null;
    var bridge = bridgeTransport({
      "ui/notifications/tool-input": function (params) {
        if (!panel) clear(root).append(h("p", { class: "empty" }, "Starting…"), h("pre", { class: "arguments" }, json(params.arguments || {})));
      },
      "ui/notifications/tool-result": function (result) { show(result); },
      "ui/notifications/tool-cancelled": function (params) {
        clear(root).append(h("p", { class: "error" }, "The call was cancelled" + (params.reason ? ": " + params.reason : ".")));
      },
      "ui/notifications/host-context-changed": function (ctx) { theme(ctx); },
      "ui/resource-teardown": function () { if (panel) panel.stop(); return {}; },
    });

    function theme(ctx) {
      if (ctx && ctx.theme) document.documentElement.setAttribute("data-theme", ctx.theme);
    }

    function openRun(taskId) {
      if (panel) panel.stop();
      clear(root);
      panel = RunPanel(root, bridge, taskId);
    }

    function show(result) {
      // A CreateTaskResult (the Tasks extension) names the Run as its taskId.
      var task = result && (result.resultType === "task" ? result : result.task);
      var sc = (result && result.structuredContent) || {};
      if (task && task.taskId) return openRun(task.taskId);
      if (Array.isArray(sc.runs)) {
        var list = h("div", { class: "list" });
        clear(root).append(list);
        return renderList(list, sc, openRun);
      }
      if (sc.taskId) return openRun(sc.taskId);
      var text = ((result && result.content) || []).map(function (c) { return c.text || json(c); }).join("\n");
      clear(root).append(h("pre", { class: result && result.isError ? "error" : "" }, text || json(result)));
    }

    clear(root).append(h("p", { class: "empty" }, "Waiting for the host…"));
    bridge.request("ui/initialize", {
      protocolVersion: APPS_PROTOCOL_VERSION,
      appInfo: { name: "runway-run-view", version: "1" },
      appCapabilities: { availableDisplayModes: ["inline"] },
    }).then(function (init) {
      theme(init && init.hostContext);
      bridge.notify("ui/notifications/initialized", {});
      if (window.ResizeObserver) {
        new ResizeObserver(function () {
          bridge.notify("ui/notifications/size-changed", {
            width: Math.ceil(document.documentElement.scrollWidth),
            height: Math.ceil(document.documentElement.scrollHeight),
          });
        }).observe(document.body);
      }
    }, function (e) {
      clear(root).append(h("p", { class: "error" }, "The host refused the view: " + e.message));
    });
  }

  // The page says which it is (`<html data-runway="console|view">`); the script is last in it.
  var app = document.getElementById("app");
  var kind = document.documentElement.getAttribute("data-runway");
  if (kind === "console") bootConsole(app);
  else if (kind === "view") bootView(app);
})();
