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
    pause: "runway_pause_run",
    resume: "runway_resume_run",
    retry: "runway_retry_run",
    workflows: "runway_list_workflows",
  };
  var IDEMPOTENCY_KEY = "dev.runway/idempotencyKey";
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

  /** How far `iso` is from now, as people say it: "3 min ago", "in 12 s". */
  function ago(iso) {
    var t = new Date(iso).getTime();
    if (!iso || isNaN(t)) return "";
    var ms = t - Date.now();
    var s = Math.round(Math.abs(ms) / 1000);
    var text = s < 5 ? (ms > 0 ? "a moment" : "just now")
      : s < 60 ? s + " s"
        : s < 3600 ? Math.round(s / 60) + " min"
          : s < 172800 ? Math.round(s / 3600) + " h"
            : Math.round(s / 86400) + " days";
    if (text === "just now") return text;
    return ms > 0 ? "in " + text : text + " ago";
  }

  /** An absolute time with how long ago (or how soon) it is beside it, kept current. */
  function whenEl(iso) {
    if (!iso) return "";
    return h("time", { datetime: iso, title: iso }, when(iso), " ",
      h("span", { class: "rel", "data-at": iso }, "(" + ago(iso) + ")"));
  }

  /** Only the relative part, with the absolute time as its tooltip (for narrow columns). */
  function agoEl(iso) {
    if (!iso) return "";
    return h("time", { datetime: iso, title: when(iso) }, h("span", { class: "rel bare", "data-at": iso }, ago(iso)));
  }

  // Relative times move on without a re-render.
  setInterval(function () {
    Array.prototype.forEach.call(document.querySelectorAll(".rel[data-at]"), function (el) {
      var text = ago(el.getAttribute("data-at"));
      el.textContent = el.classList.contains("bare") ? text : "(" + text + ")";
    });
  }, 10000);

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
  /** The server could not be reached (or a proxy in front of it said it is away). */
  var OFFLINE = "offline";
  /** JSON-RPC invalid params: what an unknown task id gets. */
  var INVALID_PARAMS = -32602;
  McpError.prototype = Object.create(Error.prototype);

  /** A tool result's structured content, or an error for a tool error. */
  function toolResult(r) {
    if (r && r.isError) {
      var text = (r.content || []).map(function (c) { return c.text || ""; }).join(" ");
      throw new McpError(0, text || "the tool failed");
    }
    return (r && r.structuredContent) || {};
  }

  /** MCP over HTTP to this server, as the signed-in person; `health(ok, error)` hears of every
   * request whether the server answered. */
  function httpTransport(token, namespace, health) {
    health = health || function () {};
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
    function body(method, params, meta) {
      var p = Object.assign({}, params);
      p._meta = Object.assign({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS_EXTENSION]: {} } },
      }, meta || {});
      return JSON.stringify({ jsonrpc: "2.0", id: nextId++, method: method, params: p });
    }
    function rpc(method, params, name, meta) {
      return fetch(url, { method: "POST", headers: headers(method, name), body: body(method, params, meta) })
        .then(function (res) {
          if (res.status === 502 || res.status === 503 || res.status === 504) {
            throw new McpError(OFFLINE, "the server answered " + res.status);
          }
          return res.text().then(function (text) {
            health(true);
            var msg;
            try { msg = JSON.parse(text); } catch (e) { throw new McpError(res.status, "HTTP " + res.status); }
            if (msg.error) throw new McpError(msg.error.code, msg.error.message, msg.error.data);
            return msg.result;
          });
        }, function () {
          throw new McpError(OFFLINE, "no answer");
        })
        .catch(function (e) {
          if (e.code === OFFLINE) health(false, e);
          throw e;
        });
    }
    return {
      callTool: function (name, args) {
        return rpc("tools/call", { name: name, arguments: args }, name).then(toolResult);
      },
      /** Call a Workflow's tool; the raw result (a task, or a complete result). A retry
       * with the same `key` finds the Run the first try started instead of starting another. */
      startRun: function (name, args, key) {
        var meta = {};
        meta[IDEMPOTENCY_KEY] = key;
        return rpc("tools/call", { name: name, arguments: args }, name, meta);
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
    if (prop.type === "object" || (prop.type === "array" && !itemOptions)) {
      // Free-form structures are typed as JSON.
      control = h("textarea", { id: id, name: name, rows: 3, class: "json", placeholder: prop.type === "array" ? "[ … ] (JSON)" : "{ … } (JSON)" });
      if (prop.default !== undefined) control.value = JSON.stringify(prop.default);
      read = function () {
        var v = control.value.trim();
        if (v === "") return required ? { error: "required" } : {};
        var parsed;
        try { parsed = JSON.parse(v); } catch (e) { return { error: "not JSON: " + e.message }; }
        var isArray = Array.isArray(parsed);
        if (prop.type === "array" ? !isArray : (isArray || parsed === null || typeof parsed !== "object")) {
          return { error: "must be a JSON " + (prop.type === "array" ? "list" : "object") };
        }
        return { value: parsed };
      };
    } else if (itemOptions) {
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

  /** The fields of an object schema, each with its error line, and a reader of them all:
   * `{content}` when every field holds, else `{}` with the errors shown. */
  function schemaFields(schema, prefix) {
    var props = (schema && schema.properties) || {};
    var required = (schema && schema.required) || [];
    var fields = Object.keys(props).map(function (name, i) {
      var f = field(name, props[name] || {}, required.indexOf(name) >= 0, prefix + "-" + i);
      f.name = name;
      f.error = h("div", { class: "error", role: "alert" });
      f.el.append(f.error);
      return f;
    });
    return {
      els: fields.map(function (f) { return f.el; }),
      read: function () {
        var content = {};
        var ok = true;
        fields.forEach(function (f) {
          var r = f.read();
          f.error.textContent = r.error ? (f.name + ": " + r.error) : "";
          if (r.error) ok = false;
          else if (r.value !== undefined) content[f.name] = r.value;
        });
        return ok ? { content: content } : {};
      },
    };
  }

  /** A form for one open question, built from its requestedSchema. */
  /** "1 of 2 approvals so far: bob" for a question that needs several approvers. */
  function approvalsNote(question) {
    if (!(question.approvals > 1)) return null;
    var by = question.approvedBy || [];
    return h("p", { class: "approvals muted" }, by.length + " of " + question.approvals + " approvals so far" + (by.length ? ": " + by.join(", ") : ""));
  }

  function answerForm(question, onAnswer) {
    var fields = schemaFields(question.requestedSchema || { properties: {} }, "q-" + question.key);
    var status = h("div", { class: "form-status", role: "status" });
    var form = h("form", { class: "answer", "data-key": question.key, novalidate: true },
      question.message ? h("p", { class: "question" }, question.message) : null,
      approvalsNote(question),
      fields.els,
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
      var r = fields.read();
      if (r.content) send({ action: "accept", content: r.content });
    }
    return form;
  }

  // ---- Pictures: the step graph and the timeline of attempts ------------------------------------

  var SVG = "http://www.w3.org/2000/svg";

  /** An SVG element; text children become text nodes. */
  function s(tag, attrs) {
    var el = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (v === undefined || v === null || v === false) return;
      if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, String(v));
    });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === undefined || c === null || c === false) continue;
      (Array.isArray(c) ? c : [c]).forEach(function (x) {
        if (x !== null && x !== undefined) el.append(x instanceof Node ? x : String(x));
      });
    }
    return el;
  }

  /** A step's records by name, and the records of its items by step. */
  function recordsOf(run) {
    var byName = {};
    var items = {};
    (run.steps || []).forEach(function (r) {
      byName[r.name] = r;
      var m = /^(.*)\[\d+\]$/.exec(r.name || "");
      if (m) (items[m[1]] = items[m[1]] || []).push(r);
    });
    return { byName: byName, items: items };
  }

  function clip(text, n) {
    text = String(text || "");
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  /** Columns of the graph: each step one column right of the last step it waits for;
   * `finally` steps after every main step, as they run. */
  function layers(nodes) {
    var col = {};
    var byName = {};
    nodes.forEach(function (n) { byName[n.name] = n; });
    function depth(n, seen) {
      if (col[n.name] !== undefined) return col[n.name];
      if (seen[n.name]) return 0;
      seen[n.name] = true;
      var d = 0;
      (n.dependsOn || []).forEach(function (dep) {
        var m = byName[dep];
        if (m && m.finally === n.finally) d = Math.max(d, depth(m, seen) + 1);
      });
      col[n.name] = d;
      return d;
    }
    var main = nodes.filter(function (n) { return !n.finally; });
    var fin = nodes.filter(function (n) { return n.finally; });
    main.forEach(function (n) { depth(n, {}); });
    var width = main.reduce(function (m, n) { return Math.max(m, col[n.name] + 1); }, 0);
    fin.forEach(function (n) { col[n.name] = depth(n, {}) + width; });
    return { col: col, mainWidth: width };
  }

  /** The Run's steps as a graph: what waits for what, each node in its state, items counted,
   * a child Run's node one click from it. */
  function stepGraph(run, onOpen) {
    var nodes = (run.graph && run.graph.steps) || [];
    if (!nodes.length) return null;
    var rec = recordsOf(run);
    var lay = layers(nodes);
    var W = 156, H = 42, GX = 44, GY = 14, PAD = 8, TOP = 18;
    var rows = {};
    var pos = {};
    nodes.forEach(function (n) {
      var c = lay.col[n.name];
      rows[c] = (rows[c] || 0) + 1;
      pos[n.name] = { x: PAD + c * (W + GX), y: TOP + PAD + (rows[c] - 1) * (H + GY) };
    });
    var cols = Object.keys(rows).length ? Math.max.apply(null, Object.keys(rows).map(Number)) + 1 : 1;
    var maxRows = Math.max.apply(null, Object.keys(rows).map(function (k) { return rows[k]; }));
    var width = PAD * 2 + cols * W + (cols - 1) * GX;
    var height = TOP + PAD * 2 + maxRows * H + (maxRows - 1) * GY;
    var edges = [];
    nodes.forEach(function (n) {
      (n.dependsOn || []).forEach(function (dep) {
        var a = pos[dep], b = pos[n.name];
        if (!a) return;
        var x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        var done = rec.byName[dep] && rec.byName[dep].phase === "Succeeded";
        edges.push(s("path", { class: "edge" + (done ? " done" : ""), d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2, "marker-end": "url(#arrow)" }));
      });
    });
    var finallyMark = null;
    if (lay.mainWidth < cols) {
      var fx = PAD + lay.mainWidth * (W + GX) - GX / 2;
      finallyMark = s("g", { class: "finally-mark" },
        s("line", { x1: fx, y1: 4, x2: fx, y2: height - 4 }),
        s("text", { x: fx + 6, y: 12 }, "finally: after every step"));
    }
    var drawn = nodes.map(function (n) {
      var r = rec.byName[n.name];
      var items = rec.items[n.name] || [];
      var state = r ? r.phase : "Pending";
      var p = pos[n.name];
      var sub = [r ? r.phase : "not started"];
      if (n.forEach) {
        var done = items.filter(function (i) { return i.phase === "Succeeded"; }).length;
        sub.push(r && r.items ? done + "/" + r.items.length + " items" : "per item");
      }
      if (r && r.attempt > 1) sub.push("attempt " + r.attempt);
      if (n.when) sub.push("when");
      var child = r && r.childRun;
      var title = n.name + " — " + (r ? r.phase : "not started") + (r && r.message ? ": " + r.message : "") +
        (n.workflow ? "\nstarts Workflow " + n.workflow : "") + (child ? "\nchild run " + child : "");
      var g = s("g", {
        class: "node state-" + String(state).toLowerCase() + (child ? " link" : ""),
        "data-step": n.name, "data-phase": r ? r.phase : "", transform: "translate(" + p.x + "," + p.y + ")",
        tabindex: child ? 0 : null, role: child ? "link" : null,
        onclick: child ? function () { onOpen(child); } : null,
        onkeydown: child ? function (e) { if (e.key === "Enter") onOpen(child); } : null,
      },
      s("title", {}, title),
      n.forEach ? s("rect", { class: "stack", x: 4, y: -4, width: W, height: H, rx: 7 }) : null,
      s("rect", { class: "box", width: W, height: H, rx: 7 }),
      s("text", { class: "name", x: 10, y: 17 }, clip(n.name, 15)),
      s("text", { class: "kind", x: W - (child ? 22 : 8), y: 16, "text-anchor": "end" }, n.kind),
      s("text", { class: "sub", x: 10, y: 33 }, clip(sub.join(" · "), 26)),
      child ? s("text", { class: "go", x: W - 16, y: 17 }, "↗") : null);
      return g;
    });
    return s("svg", { class: "graph", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img", "aria-label": "step graph" },
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L8,4 L0,8 z", class: "arrow" }))),
      finallyMark, edges, drawn);
  }

  /** A span of time, tersely: 850ms, 4.2s, 3m20s, 1h05m. */
  function short(d) {
    if (d < 1000) return Math.round(d) + "ms";
    var sec = d / 1000;
    if (sec < 10) return sec.toFixed(1) + "s";
    if (sec < 60) return Math.round(sec) + "s";
    var m = Math.floor(sec / 60), r = Math.round(sec % 60);
    if (m < 60) return m + "m" + (r ? (r < 10 ? "0" : "") + r + "s" : "");
    var hh = Math.floor(m / 60), mm = m % 60;
    return hh + "h" + (mm < 10 ? "0" : "") + mm + "m";
  }

  function ms(iso) {
    var t = new Date(iso).getTime();
    return isNaN(t) ? null : t;
  }

  /** Each step record's attempts on one time axis: failed attempts, the current one, and the
   * wait before a retry (with when it runs next). */
  function timeline(run) {
    var records = orderedRecords(run);
    if (!records.length) return null;
    var now = Date.now();
    var t0 = ms(run.createdAt) || ms(run.startedAt) || now;
    var t1 = ms(run.finishedAt) || now;
    records.forEach(function (r) {
      var wake = ms(r.wakeAt);
      if (wake && wake > t1) t1 = wake;
    });
    if (t1 - t0 < 1000) t1 = t0 + 1000;
    var LABEL = 150, BAR = 560, ROW = 20, TOP = 22, width = LABEL + BAR + 10;
    var height = TOP + records.length * ROW + 4;
    var x = function (t) { return LABEL + Math.max(0, Math.min(1, (t - t0) / (t1 - t0))) * BAR; };
    var ticks = [];
    for (var i = 0; i <= 4; i++) {
      var t = t0 + (t1 - t0) * i / 4;
      ticks.push(s("g", { class: "tick" },
        s("line", { x1: x(t), y1: TOP - 4, x2: x(t), y2: height }),
        s("text", { x: x(t), y: 12, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, "+" + short(t - t0))));
    }
    var bar = function (from, to, cls, title, y) {
      var a = x(from), b = Math.max(x(to), a + 2);
      return s("rect", { class: "bar " + cls, x: a, y: y + 4, width: b - a, height: ROW - 8, rx: 2 }, s("title", {}, title));
    };
    var rows = records.map(function (r, i) {
      var y = TOP + i * ROW;
      var bars = [];
      earlierAttempts(r).forEach(function (a) {
        var from = ms(a.startedAt), to = ms(a.finishedAt) || from;
        if (from) bars.push(bar(from, to, "failed", "attempt " + a.attempt + " failed after " + duration(a.startedAt, a.finishedAt) + ": " + (a.message || ""), y));
      });
      var start = ms(r.attemptStartedAt) || ms(r.startedAt);
      var wake = ms(r.wakeAt);
      if (r.phase === "Retrying" && wake) {
        var last = (r.attempts || []).slice(-1)[0];
        var from = (last && ms(last.finishedAt)) || start || now;
        bars.push(bar(from, wake, "wait", "waiting to retry; attempt " + (r.attempt + 1 || "") + " at " + when(r.wakeAt), y));
      } else if (start) {
        var end = ms(r.finishedAt) || (TERMINAL[run.phase] ? ms(run.finishedAt) : null) || now;
        bars.push(bar(start, end, "phase-" + String(r.phase).toLowerCase(), (isItem(r.name) ? "item " : "step ") + r.name + ": " + r.phase +
          (r.attempt > 1 ? " (attempt " + r.attempt + ")" : "") + ", " + duration(r.attemptStartedAt || r.startedAt, r.finishedAt), y));
      }
      return s("g", { class: "row", "data-step": r.name },
        s("text", { class: "label" + (isItem(r.name) ? " item" : ""), x: isItem(r.name) ? 14 : 4, y: y + ROW - 6 }, clip(r.name, 22)),
        bars);
    });
    var nowLine = TERMINAL[run.phase] ? null : s("line", { class: "now", x1: x(now), y1: TOP - 6, x2: x(now), y2: height });
    return s("svg", { class: "timeline", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img", "aria-label": "timeline of attempts" },
      ticks, rows, nowLine);
  }

  // ---- Dialogs ----------------------------------------------------------------------------------

  /** A modal question; resolves with the reason typed (or "" when none is asked), or null
   * when the person backs out. */
  function confirmDialog(opts) {
    return new Promise(function (resolve) {
      var reason = opts.reason ? h("textarea", { id: "dialog-reason", rows: 2, maxlength: 1024, placeholder: opts.reason }) : null;
      var dialog = h("dialog", { class: "confirm", "aria-labelledby": "dialog-title" },
        h("h3", { id: "dialog-title" }, opts.title),
        opts.body ? h("div", { class: "dialog-body" }, opts.body) : null,
        reason ? h("label", { for: "dialog-reason" }, "Reason (recorded with the run)") : null, reason,
        h("div", { class: "actions" },
          h("button", { type: "button", class: "back", onclick: function () { close(null); } }, opts.back || "Back"),
          opts.confirm ? h("button", { type: "button", class: opts.danger ? "cancel confirm-go" : "primary confirm-go", onclick: function () { close(reason ? reason.value.trim() : ""); } }, opts.confirm) : null));
      function close(v) {
        dialog.close();
        dialog.remove();
        resolve(v);
      }
      dialog.addEventListener("cancel", function (e) { e.preventDefault(); close(null); });
      document.body.append(dialog);
      dialog.showModal();
      (reason || dialog.querySelector(".confirm-go") || dialog.querySelector(".back")).focus();
    });
  }

  // ---- A Run in full ------------------------------------------------------------------------

  function section(title, body, cls) {
    return h("section", { class: cls || "" }, h("h3", {}, title), body);
  }

  /** An item of a `forEach` step (`deploy[2]`): shown under its step, not counted as one. */
  function isItem(name) {
    return /\[\d+\]$/.test(name || "");
  }

  /** The step records in reading order: each step, then its items, whenever they started. */
  function orderedRecords(run) {
    var itemsOf = {};
    (run.steps || []).forEach(function (r) {
      var m = /^(.*)\[\d+\]$/.exec(r.name || "");
      if (m) (itemsOf[m[1]] = itemsOf[m[1]] || []).push(r);
    });
    var ordered = [];
    (run.steps || []).forEach(function (r) {
      if (isItem(r.name)) return;
      ordered.push(r);
      (itemsOf[r.name] || []).forEach(function (i) { ordered.push(i); });
    });
    return ordered;
  }

  /** The attempts of a step before the one its record describes (the record keeps the
   * history of every attempt, the last one included). */
  function earlierAttempts(r) {
    return (r.attempts || []).filter(function (a) { return a.attempt !== r.attempt; });
  }

  /** A link to another Run: the console routes to it, the view opens it in place. */
  function runLink(taskId, onOpen, short) {
    return h("a", { href: "#", class: "run-link", "data-task": taskId, title: taskId, onclick: function (e) { e.preventDefault(); onOpen(taskId); } }, short ? shortId(taskId) : taskId);
  }

  function stepRows(run, onOpen) {
    var rows = [];
    orderedRecords(run).forEach(function (r) {
      var item = isItem(r.name);
      var next = r.phase === "Retrying" && r.wakeAt
        ? h("div", { class: "next-attempt" }, "next attempt ", whenEl(r.wakeAt)) : null;
      rows.push(h("tr", { "data-step": r.name, class: item ? "item" : "" },
        h("td", {}, item ? "↳ " + r.name : r.name, r.finally ? h("span", { class: "tag" }, "finally") : null,
          r.items ? h("span", { class: "tag" }, r.items.length + " items") : null),
        h("td", {}, phaseBadge(r.phase)),
        h("td", {}, String(r.attempt || 1)),
        h("td", {}, r.startedAt ? agoEl(r.startedAt) : ""),
        h("td", {}, duration(r.startedAt, r.finishedAt)),
        h("td", {}, r.message || "", next,
          r.childRun ? h("div", {}, "child run ", runLink(r.childRun, onOpen)) : null,
          r.reusedFrom ? h("div", { class: "reused" }, "reused from ", runLink(r.reusedFrom, onOpen, true)) : null,
          r.output !== undefined ? h("details", {}, h("summary", {}, "output"), h("pre", {}, json(r.output))) : null)));
      earlierAttempts(r).forEach(function (a) {
        rows.push(h("tr", { class: "attempt" },
          h("td", {}, "↳ attempt " + a.attempt), h("td", {}, phaseBadge("Failed")), h("td", {}, String(a.attempt)),
          h("td", {}, a.startedAt ? agoEl(a.startedAt) : ""), h("td", {}, duration(a.startedAt, a.finishedAt)), h("td", {}, a.message || "")));
      });
    });
    var started = {};
    (run.steps || []).forEach(function (r) { started[r.name] = true; });
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

  /** The Runs this one started (its `workflow` steps' and items' child Runs). */
  function childRuns(run) {
    return (run.steps || []).filter(function (r) { return r.childRun; }).map(function (r) { return { step: r.name, taskId: r.childRun, phase: r.phase }; });
  }

  /** Cancel, after the person confirmed it and gave a reason. */
  function cancelButton(run, client, refresh) {
    var status = h("span", { class: "form-status", role: "status" });
    var button = h("button", {
      type: "button", class: "cancel",
      onclick: function () {
        confirmDialog({
          title: "Cancel " + run.taskId + "?",
          body: h("p", {}, "Its running steps stop and its finally steps run. This cannot be undone."),
          reason: "why (optional)",
          confirm: "Cancel run",
          back: "Keep it running",
          danger: true,
        }).then(function (reason) {
          if (reason === null) return;
          button.disabled = true;
          status.textContent = "cancelling…";
          client.callTool(TOOLS.cancel, { taskId: run.taskId, reason: reason || "cancelled in the Runway console" })
            .then(function () { status.textContent = "cancel requested"; refresh(); },
              function (err) { status.textContent = err.message; button.disabled = false; });
        });
      },
    }, "Cancel run…");
    return h("div", { class: "actions" }, button, " ", status);
  }

  /** Pause (after the person confirmed it, with a reason) or resume a Run. */
  function pauseButton(run, client, refresh) {
    var status = h("span", { class: "form-status", role: "status" });
    function send(tool, args, doing, done) {
      button.disabled = true;
      status.textContent = doing;
      client.callTool(tool, args).then(function () { status.textContent = done; refresh(); },
        function (err) { status.textContent = err.message; button.disabled = false; });
    }
    var button = run.paused
      ? h("button", { type: "button", class: "resume primary", onclick: function () {
          send(TOOLS.resume, { taskId: run.taskId }, "resuming…", "resume requested");
        } }, "Resume run")
      : h("button", { type: "button", class: "pause", onclick: function () {
          confirmDialog({
            title: "Pause " + run.taskId + "?",
            body: h("p", {}, "Steps that run now finish; no new step starts until someone resumes it. Its deadline keeps running."),
            reason: "why (optional)",
            confirm: "Pause run",
            back: "Keep it running",
          }).then(function (reason) {
            if (reason === null) return;
            send(TOOLS.pause, reason ? { taskId: run.taskId, reason: reason } : { taskId: run.taskId }, "pausing…", "pause requested");
          });
        } }, "Pause run…");
    return [button, " ", status];
  }

  /** Retry a failed Run from its failed step, then show the new Run. */
  function retryButton(run, client, onOpen) {
    var status = h("span", { class: "form-status", role: "status" });
    var button = h("button", { type: "button", class: "retry primary", onclick: function () {
      button.disabled = true;
      status.textContent = "retrying…";
      client.callTool(TOOLS.retry, { taskId: run.taskId }).then(function (answer) {
        status.textContent = "retried as " + answer.taskId;
        if (answer.taskId) onOpen(answer.taskId);
      }, function (err) { status.textContent = err.message; button.disabled = false; });
    } }, "Retry from the failed step");
    return h("div", { class: "actions" }, button, " ", status);
  }

  /** What the facts say of a paused Run: who paused it, or which step ran out of retries. */
  function pausedFact(p) {
    var who = p.step ? "step " + p.step + " ran out of retries" : "by " + (p.by || "?");
    return [h("dt", {}, "Paused"), h("dd", { class: "paused-by" }, who + " since " + when(p.since) + (p.reason ? " (" + p.reason + ")" : ""))];
  }

  /** Render `run` (the runway_get_run answer) into `root`; actions go through `client`;
   * `onOpen(taskId)` shows another Run (a parent or a child). */
  function renderRun(root, run, client, refresh, onOpen) {
    clear(root);
    var done = TERMINAL[run.phase];
    var planned = (run.plannedSteps || []).length;
    var finished = (run.steps || []).filter(function (r) { return !isItem(r.name) && (!r.finally && TERMINAL[r.phase] || r.phase === "Skipped"); }).length;
    var asked = run.questions || [];
    var mine = asked.filter(function (q) { return q.awaitingYou && q.form; });
    var others = asked.filter(function (q) { return !(q.awaitingYou && q.form); });
    var children = childRuns(run);
    var graph = stepGraph(run, onOpen);
    var times = timeline(run);
    append(root, [
      h("header", { class: "run-head" },
        h("h2", {}, run.title || run.workflow, " ", phaseBadge(run.phase)),
        h("div", { class: "task-id" }, "task ", h("code", {}, run.taskId)),
        run.statusMessage ? h("p", { class: "status-message" }, run.statusMessage) : null,
        planned ? h("progress", { max: planned, value: done ? planned : Math.min(finished, planned), title: finished + " of " + planned + " steps" }) : null,
        done || !run.youMayCancel || run.cancel ? null : h("div", { class: "actions" }, pauseButton(run, client, refresh)),
        done || !run.youMayCancel ? null : cancelButton(run, client, refresh),
        run.youMayRetry ? retryButton(run, client, onOpen) : null),
      h("dl", { class: "facts" },
        h("dt", {}, "Workflow"), h("dd", {}, run.workflow),
        h("dt", {}, "Requested by"), h("dd", {}, run.requestedBy ? run.requestedBy.username : "—"),
        h("dt", {}, "Created"), h("dd", {}, whenEl(run.createdAt)),
        run.finishedAt ? [h("dt", {}, "Finished"), h("dd", {}, whenEl(run.finishedAt))] : null,
        run.archived ? [h("dt", {}, "Archived"), h("dd", { class: "archived-at" }, whenEl(run.archivedAt), " (deleted from the store since; this is the archive's record)")] : null,
        h("dt", {}, "Duration"), h("dd", {}, duration(run.startedAt || run.createdAt, run.finishedAt)),
        run.deadline && !done ? [h("dt", {}, "Deadline"), h("dd", {}, whenEl(run.deadline))] : null,
        run.parent ? [h("dt", {}, "Parent run"), h("dd", { class: "parent" }, runLink(run.parent.taskId, onOpen))] : null,
        children.length ? [h("dt", {}, "Child runs"), h("dd", { class: "children" }, children.map(function (c) {
          return h("div", {}, runLink(c.taskId, onOpen), " ", h("small", {}, "from " + c.step))
        }))] : null,
        run.paused && !done ? pausedFact(run.paused) : null,
        run.retryOf ? [h("dt", {}, "Retry of"), h("dd", { class: "retry-of" }, runLink(run.retryOf.name, onOpen))] : null,
        run.cancel ? [h("dt", {}, "Cancelled by"), h("dd", { class: "cancelled-by" }, (run.cancel.requestedBy || "?") + " at " + when(run.cancel.requestedAt) + (run.cancel.reason ? " (" + run.cancel.reason + ")" : ""))] : null),
      mine.length ? section("Waiting for your answer", mine.map(function (q) {
        return answerForm(q, function (response) {
          var responses = {};
          responses[q.key] = response;
          return client.callTool(TOOLS.answer, { taskId: run.taskId, inputResponses: responses }).then(refresh);
        });
      }), "questions") : null,
      others.length ? section("Open questions", h("ul", {}, others.map(function (q) {
        return h("li", {}, h("code", {}, q.key), " ", q.message || q.method, approvalsNote(q),
          q.form ? " — waiting for someone else's answer" : " — asked of the calling agent");
      }))) : null,
      (run.result || run.error) ? section("Result", resultView(run), "result") : null,
      graph ? section("Graph", h("div", { class: "picture" }, graph), "graph") : null,
      times ? section("Timeline", h("div", { class: "picture" }, times), "timeline") : null,
      section("Steps", h("table", { class: "steps" },
        h("thead", {}, h("tr", {}, ["Step", "Phase", "Attempt", "Started", "Duration", "Detail"].map(function (c) { return h("th", {}, c); }))),
        h("tbody", {}, stepRows(run, onOpen)))),
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
            h("td", {}, agoEl(e.time)), h("td", {}, e.type), h("td", {}, e.reason), h("td", {}, e.message));
        }))) : h("p", {}, "no events")) : null,
    ]);
  }

  /** Keeps one Run on screen up to date: listen where the transport can, else poll. A server
   * that is away leaves the last picture up and is asked again; a Run that is gone, or never
   * readable by this caller, is said once. */
  function RunPanel(root, client, taskId, onOpen) {
    var stopListen = null;
    var timer = null;
    var stopped = false;
    var last = null;
    // A Run deleted after its time to live is read from the archive instead (a link to it
    // outlives it); `missing` is why the live one was not there.
    var archived = false;
    var missing = null;
    function refresh() {
      if (stopped) return Promise.resolve();
      var args = archived ? { taskId: taskId, archived: true } : { taskId: taskId };
      return client.callTool(TOOLS.get, args).then(function (run) {
        if (stopped) return;
        var key = json(run);
        // Keep what a person is typing while the question they are answering stays open.
        var editing = root.querySelector("form.answer:focus-within");
        var typing = editing && (run.questions || []).some(function (q) {
          return q.key === editing.getAttribute("data-key") && q.awaitingYou;
        });
        if (key !== last && !typing) {
          last = key;
          renderRun(root, run, client, refresh, onOpen);
        } else if (!TERMINAL[run.phase]) {
          // Time moves on while nothing else changes: redraw the timeline alone, so that open
          // details and what has focus stay as they are.
          var picture = root.querySelector("section.timeline .picture");
          var fresh = picture && timeline(run);
          if (fresh) clear(picture).append(fresh);
        }
        if (TERMINAL[run.phase] && !typing) stop(true);
      }, function (e) {
        if (e.code === OFFLINE) return;
        if (!archived && e.code === INVALID_PARAMS) {
          archived = true;
          missing = e;
          return refresh();
        }
        stop(false);
        clear(root).append(h("p", { class: "error" }, (missing || e).message));
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

  /** Columns of the list: the status message last, so that a long one pushes nothing else out
   * of view; `sort` reads a Run for sorting the page by that column. */
  var COLUMNS = [
    { title: "Run", key: "taskId", sort: function (r) { return r.taskId; } },
    { title: "Workflow", key: "workflow", sort: function (r) { return r.workflow; } },
    { title: "Phase", key: "phase", sort: function (r) { return PHASES.indexOf(r.phase); } },
    { title: "Requested by", key: "requestedBy", sort: function (r) { return r.requestedBy || ""; } },
    { title: "Created", key: "createdAt", server: true },
    { title: "Status", key: "statusMessage", sort: function (r) { return r.statusMessage || ""; } },
  ];

  /** A long task id cut in the middle (`nightly-report-df4p…mrclzu`): its Workflow and
   * enough of both ends to tell Runs apart; the whole id is the link's title. */
  function shortId(id) {
    return id.length > 30 ? id.slice(0, 20) + "…" + id.slice(-6) : id;
  }

  /** The list of Runs. `opts.sort` ({key, dir}) orders the page by a column; `opts.order`
   * is the server's order (newest or oldest first), which the Created column shows and
   * `opts.onSort(column)` changes. */
  function renderList(root, page, onOpen, opts) {
    opts = opts || {};
    clear(root);
    if (!page.runs.length) {
      root.append(h("p", { class: "empty" }, "No runs to show."));
      return;
    }
    var runs = page.runs.slice();
    var sort = opts.sort;
    var col = sort && COLUMNS.filter(function (c) { return c.key === sort.key; })[0];
    if (col && col.sort) {
      runs.sort(function (a, b) {
        var x = col.sort(a), y = col.sort(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (sort.dir === "desc" ? -1 : 1);
      });
    }
    function header(c) {
      var state = c.server ? (sort ? "none" : (opts.order === "oldest" ? "ascending" : "descending"))
        : (sort && sort.key === c.key ? (sort.dir === "desc" ? "descending" : "ascending") : "none");
      var arrow = state === "ascending" ? " ▲" : state === "descending" ? " ▼" : "";
      var label = opts.onSort
        ? h("button", { type: "button", class: "sort", "data-sort": c.key, onclick: function () { opts.onSort(c); } }, c.title, arrow)
        : c.title;
      return h("th", { class: "col-" + c.key, "aria-sort": opts.onSort ? state : null }, label);
    }
    root.append(h("table", { class: "runs" },
      h("thead", {}, h("tr", {}, COLUMNS.map(header))),
      h("tbody", {}, runs.map(function (r) {
        return h("tr", { "data-task": r.taskId, class: r.awaitingYou.length ? "awaiting" : "" },
          h("td", { class: "col-taskId" }, h("a", { href: "#", title: r.taskId, "aria-label": r.taskId, onclick: function (e) { e.preventDefault(); onOpen(r.taskId); } }, shortId(r.taskId)),
            r.awaitingYou.length ? h("span", { class: "tag you" }, "your answer") : null),
          h("td", { class: "col-workflow" }, r.workflow), h("td", { class: "col-phase" }, phaseBadge(r.phase)),
          h("td", { class: "col-requestedBy", title: r.requestedBy || "" }, r.requestedBy || ""),
          h("td", { class: "col-createdAt" }, agoEl(r.createdAt)),
          h("td", { class: "col-statusMessage", title: r.statusMessage || "" }, r.statusMessage || ""));
      }))));
  }

  // ---- Workflows ----------------------------------------------------------------------------

  /** A new idempotency key: one per start, so that a double click or a retry after a lost
   * answer starts one Run. */
  function freshKey() {
    var bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return "console-" + Array.prototype.map.call(bytes, function (b) { return (b < 16 ? "0" : "") + b.toString(16); }).join("");
  }

  function readyBadge(w) {
    var ok = w.ready && w.ready.status === "True";
    var text = w.ready ? (ok ? "Ready" : w.ready.reason || "Not ready") : "Not validated yet";
    return h("span", { class: "phase " + (ok ? "phase-succeeded" : "phase-failed"), "data-ready": ok ? "True" : "False", title: (w.ready && w.ready.message) || "" }, text);
  }

  function scheduleState(sch) {
    if (sch.error) return h("span", { class: "phase phase-failed", title: sch.error }, "Invalid");
    return sch.suspend ? h("span", { class: "phase phase-queued" }, "Paused") : h("span", { class: "phase phase-running" }, "Active");
  }

  /** The list of Workflows; `onOpen(name)` shows one. */
  function renderWorkflows(root, list, onOpen, selected) {
    clear(root);
    if (!list.length) {
      root.append(h("p", { class: "empty" }, "No Workflows in this namespace."));
      return;
    }
    root.append(h("table", { class: "workflows" },
      h("thead", {}, h("tr", {}, ["Workflow", "Ready", "Runs", "Schedules"].map(function (c) { return h("th", {}, c); }))),
      h("tbody", {}, list.map(function (w) {
        var runs = w.runs ? w.runs.active + " active / " + w.runs.total : "—";
        return h("tr", { "data-workflow": w.name, class: w.name === selected ? "selected" : "" },
          h("td", {}, h("a", { href: "#", onclick: function (e) { e.preventDefault(); onOpen(w.name); } }, w.title || w.name),
            h("div", { class: "muted" }, "tool ", w.tool)),
          h("td", {}, readyBadge(w), w.paused ? [" ", h("span", { class: "tag paused", title: "calls are taken; their Runs wait until it is resumed" }, "paused")] : null),
          h("td", { title: w.runs ? "" : "you may not list Runs" }, runs),
          h("td", {}, w.schedules.length ? w.schedules.map(function (sch) { return h("div", {}, sch.name, " ", scheduleState(sch)); }) : "—"));
      }))));
  }

  /** The command that pauses or resumes schedule `index` of `w`: schedules live in the
   * Workflow's manifest, so that is where they change. */
  function suspendCommand(namespace, w, index, suspend) {
    var patch = JSON.stringify([{ op: "replace", path: "/spec/schedules/" + index + "/suspend", value: suspend }]);
    return "kubectl -n " + namespace + " patch workflow " + w.name + " --type=json -p '" + patch + "'";
  }

  /** One Workflow: its Ready condition, the form that starts a Run, and its schedules. */
  function renderWorkflow(root, w, ctx) {
    clear(root);
    var ok = w.ready && w.ready.status === "True";
    var startable = ok && !w.requires.length;
    var key = freshKey();
    var fields = schemaFields(w.startForm, "start-" + w.name);
    var status = h("div", { class: "form-status", role: "status" });
    var result = h("div", { class: "start-result" });
    function start(args, button) {
      button.disabled = true;
      status.className = "form-status";
      status.textContent = "starting…";
      return ctx.client.startRun(w.tool, args, key).then(function (r) {
        button.disabled = false;
        key = freshKey();
        if (r && r.taskId) { status.textContent = "started " + r.taskId; ctx.openRun(r.taskId); return; }
        // Arguments the tool refuses come as a tool error, before any Run: the form's error.
        var text = r && r.isError && r.content && r.content[0] && r.content[0].text;
        if (text && text.indexOf("invalid arguments") === 0) {
          status.className = "form-status error";
          status.textContent = text;
          return;
        }
        // A Workflow that never runs as a task answers when it is done.
        status.textContent = r && r.isError ? "the run failed" : "done";
        clear(result).append(resultView({ result: r }));
      }, function (e) {
        button.disabled = false;
        status.className = "form-status error";
        status.textContent = e.message;
      });
    }
    var startButton = h("button", {
      type: "button", class: "primary start", disabled: !startable,
      onclick: function () {
        var r = fields.read();
        if (r.content) start(r.content, startButton);
      },
    }, "Start run");
    var why = !ok ? "It cannot start: " + ((w.ready && w.ready.message) || "it is not Ready.")
      : w.requires.length ? "It needs a client that can answer " + w.requires.join(", ") + ": start it from an MCP client that declares it."
        : null;
    append(root, [
      h("header", { class: "run-head" },
        h("h2", {}, w.title || w.name, " ", readyBadge(w)),
        h("div", { class: "task-id" }, "tool ", h("code", {}, w.tool), " · ", w.steps + " steps · mode " + w.mode),
        w.description ? h("p", { class: "status-message" }, w.description) : null,
        !ok && w.ready ? h("p", { class: "error ready-message" }, w.ready.reason + ": " + w.ready.message) : null),
      section("Start a run", h("form", { class: "start", novalidate: true, onsubmit: function (e) { e.preventDefault(); } },
        why ? h("p", { class: "muted why" }, why) : null,
        fields.els,
        h("div", { class: "actions" }, startButton),
        status, result), "start"),
      w.schedules.length ? section("Schedules", h("table", { class: "schedules" },
        h("thead", {}, h("tr", {}, ["Schedule", "When", "Next", "Last", "Runs it started"].map(function (c) { return h("th", {}, c); }))),
        h("tbody", {}, w.schedules.map(function (sch, i) {
          var runNow = h("button", {
            type: "button", class: "run-now", disabled: !startable,
            onclick: function () {
              confirmDialog({
                title: "Run " + w.name + " now?",
                body: [h("p", {}, "A Run with the arguments of schedule " + sch.name + ", requested by you. It does not move the schedule or count in its history."),
                  h("pre", {}, json(sch.arguments || {}))],
                confirm: "Start run",
              }).then(function (go) { if (go !== null) start(sch.arguments || {}, runNow); });
            },
          }, "Run now");
          var pause = h("button", {
            type: "button", class: "pause",
            onclick: function () {
              var cmd = suspendCommand(ctx.namespace, w, i, !sch.suspend);
              var code = h("pre", { class: "command" }, cmd);
              var copied = h("span", { class: "form-status", role: "status" });
              confirmDialog({
                title: (sch.suspend ? "Resume " : "Pause ") + sch.name,
                body: [h("p", {}, "Schedules live in the Workflow's manifest, so " + (sch.suspend ? "resuming" : "pausing") +
                  " one is a change to it: set suspend to " + !sch.suspend + " where the manifest is kept, or patch it in place (GitOps tools may revert that):"),
                  code,
                  h("button", { type: "button", class: "copy", onclick: function () {
                    var done = function () { copied.textContent = "copied"; };
                    if (navigator.clipboard) navigator.clipboard.writeText(cmd).then(done, function () { copied.textContent = "select the command and copy it"; });
                  } }, "Copy"), " ", copied],
                back: "Close",
              });
            },
          }, sch.suspend ? "Resume…" : "Pause…");
          return h("tr", { "data-schedule": sch.name },
            h("td", {}, h("strong", {}, sch.name), " ", scheduleState(sch),
              h("div", { class: "muted" }, "concurrency " + (sch.concurrencyPolicy || "Allow")),
              h("div", { class: "actions-cell" }, runNow, " ", pause)),
            h("td", {}, h("code", {}, sch.cron), sch.timeZone ? h("div", { class: "muted" }, sch.timeZone) : null),
            h("td", { class: "next" }, sch.nextAt ? whenEl(sch.nextAt) : "—"),
            h("td", { class: "last" }, sch.lastAt ? whenEl(sch.lastAt) : (sch.runs ? "never" : "—")),
            h("td", { class: "made" }, sch.runs ? (sch.runs.length ? sch.runs.map(function (r) {
              return h("div", {}, runLink(r.taskId, ctx.openRun, true), " ", phaseBadge(r.phase));
            }) : "none yet") : h("span", { class: "muted" }, "you may not list Runs")));
        }))), "schedules-section") : null,
    ]);
  }

  // ---- The console --------------------------------------------------------------------------

  var TOKEN_KEY = "runway.token";
  /** How soon a server that is away is asked again. */
  var RETRY_MS = 3000;

  function bootConsole(root) {
    var token = sessionStorage.getItem(TOKEN_KEY) || "";
    var state = {
      namespace: null, view: "runs", filters: {}, order: "newest", sort: null, cursors: [null], page: 0,
      panel: null, listTimer: null, listStop: null, workflows: [], workflow: null,
    };
    var whoEl = h("span", { class: "who" });
    var nsSelect = h("select", { id: "namespace", "aria-label": "namespace" });
    var signOut = h("button", { type: "button", onclick: function () { sessionStorage.removeItem(TOKEN_KEY); location.hash = ""; location.reload(); } }, "Sign out");
    var listEl = h("div", { class: "list", id: "runs" });
    var detailEl = h("div", { class: "detail", id: "run" });
    var pager = h("div", { class: "pager" });
    var notice = h("div", { class: "notice", role: "status" });
    var tabs = h("nav", { class: "tabs" });
    var client = null;

    // ---- the server being away: one banner, retried on a timer and on demand ----
    var downSince = null;
    var retryTimer = null;
    var bannerText = h("span", {});
    var banner = h("div", { class: "banner", id: "offline", role: "alert", hidden: true },
      bannerText, " ", h("button", { type: "button", class: "retry", onclick: function () { retry(); } }, "Retry now"));
    document.body.insertBefore(banner, document.body.firstChild);
    function health(ok, err) {
      if (ok) {
        if (downSince) {
          downSince = null;
          banner.hidden = true;
          clearTimeout(retryTimer);
        }
        return;
      }
      if (!downSince) downSince = new Date().toISOString();
      bannerText.textContent = "The Runway server cannot be reached (" + err.message + " since " + when(downSince) +
        "). What you see may be out of date; trying again every " + RETRY_MS / 1000 + " s.";
      banner.hidden = false;
      clearTimeout(retryTimer);
      retryTimer = setTimeout(retry, RETRY_MS);
    }
    var onRetry = null;
    function retry() {
      clearTimeout(retryTimer);
      bannerText.textContent = "Trying the Runway server again…";
      if (onRetry) onRetry();
    }

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
      onRetry = start;
      fetch("/ui/api/namespaces", { headers: hd }).then(function (res) {
        // Busy (429: this caller's share is in use) is waited out like a server that is away.
        if (res.status === 429 || (res.status >= 502 && res.status <= 504)) throw new McpError(OFFLINE, "the server answered " + res.status);
        health(true);
        if (res.status === 401) { sessionStorage.removeItem(TOKEN_KEY); signIn(token ? "That token was not accepted." : null); return null; }
        if (!res.ok) throw new Error("the server answered " + res.status);
        return res.json();
      }, function () {
        throw new McpError(OFFLINE, "no answer");
      }).then(function (me) { if (me) shell(me); }, function (e) {
        if (e.code === OFFLINE) {
          health(false, e);
          if (!root.firstChild || root.querySelector("noscript")) clear(root).append(h("p", { class: "empty waiting" }, "Waiting for the Runway server…"));
          return;
        }
        signIn(e.message);
      });
    }

    function filters() {
      var field = function (el, label) { return h("label", { class: "filter" }, h("span", {}, label), el); };
      var wf = h("input", { type: "text", id: "filter-workflow", placeholder: "any", size: 12 });
      var phase = h("select", { id: "filter-phase" }, h("option", { value: "" }, "any"),
        PHASES.map(function (p) { return h("option", { value: p }, p); }));
      var by = h("input", { type: "text", id: "filter-requested-by", placeholder: "anyone", size: 10 });
      var since = h("input", { type: "datetime-local", id: "filter-since" });
      var until = h("input", { type: "datetime-local", id: "filter-until" });
      var labels = h("input", { type: "text", id: "filter-labels", placeholder: "team=payments,!canary", size: 18 });
      var waiting = h("input", { type: "checkbox", id: "filter-waiting" });
      var mine = h("input", { type: "checkbox", id: "filter-mine" });
      var archive = h("input", { type: "checkbox", id: "filter-archived" });
      var error = h("div", { class: "error filter-error", role: "alert" });
      var inputs = [wf, phase, by, since, until, labels, waiting, mine, archive];
      function apply() {
        var f = {};
        if (wf.value.trim()) f.workflow = wf.value.trim();
        if (phase.value) f.phase = phase.value;
        if (by.value.trim()) f.requestedBy = by.value.trim();
        if (since.value) f.since = new Date(since.value).toISOString();
        if (until.value) f.until = new Date(until.value).toISOString();
        if (labels.value.trim()) f.labels = labels.value.trim();
        if (waiting.checked) f.waitingForMe = true;
        if (mine.checked) f.requestedByMe = true;
        if (archive.checked) f.archived = true;
        state.filters = f;
        state.cursors = [null];
        state.page = 0;
        loadList();
      }
      inputs.forEach(function (el) { el.addEventListener("change", apply); });
      var reset = h("button", { type: "button", class: "clear-filters", onclick: function () {
        inputs.forEach(function (el) { if (el.type === "checkbox") el.checked = false; else el.value = ""; });
        apply();
      } }, "Clear");
      filterError = error;
      return h("div", { class: "filters" },
        field(wf, "Workflow"), field(phase, "Phase"), field(by, "Requested by"),
        field(since, "Created from"), field(until, "to"), field(labels, "Labels"),
        h("label", { for: "filter-waiting", class: "check" }, waiting, " waiting for my answer"),
        h("label", { for: "filter-mine", class: "check" }, mine, " requested by me"),
        h("label", { for: "filter-archived", class: "check", title: "Finished runs kept in the archive after they were deleted" }, archive, " archived"), reset, error);
    }
    var filterError = null;

    function shell(me) {
      clear(nsSelect);
      me.namespaces.forEach(function (ns) { nsSelect.append(h("option", { value: ns }, ns)); });
      whoEl.textContent = me.user;
      clear(root).append(
        h("header", { class: "top" }, h("h1", {}, "Runway"), h("label", { for: "namespace" }, "Namespace "), nsSelect, tabs,
          h("span", { class: "spacer" }), whoEl, " ", token ? signOut : null),
        notice,
        me.namespaces.length ? h("main", {},
          h("div", { class: "left" }, h("div", { class: "filters-slot" }), listEl, pager),
          detailEl) : h("p", { class: "empty" }, "You may not read Runs in any namespace."));
      if (!me.namespaces.length) return;
      root.querySelector(".filters-slot").replaceWith(filters());
      var route = parseHash();
      var ns = me.namespaces.indexOf(route.namespace) >= 0 ? route.namespace : (me.namespace && me.namespaces.indexOf(me.namespace) >= 0 ? me.namespace : me.namespaces[0]);
      nsSelect.value = ns;
      nsSelect.addEventListener("change", function () { go(nsSelect.value, state.view, null); });
      window.addEventListener("hashchange", route_);
      onRetry = function () { refreshAll(); };
      if (route.namespace === ns) route_();
      else go(ns, "runs", null);
    }

    function parseHash() {
      var m = /^#\/ns\/([^/]+)(?:\/(run|workflows)(?:\/([^/]+))?)?$/.exec(location.hash);
      if (!m) return {};
      var view = m[2] === "workflows" ? "workflows" : "runs";
      return { namespace: decodeURIComponent(m[1]), view: view, item: m[3] ? decodeURIComponent(m[3]) : null };
    }

    function hashOf(ns, view, item) {
      var base = "#/ns/" + encodeURIComponent(ns);
      if (view === "workflows") return base + "/workflows" + (item ? "/" + encodeURIComponent(item) : "");
      return base + (item ? "/run/" + encodeURIComponent(item) : "");
    }

    function route_() {
      var r = parseHash();
      if (!r.namespace) return;
      if (r.namespace !== state.namespace) { nsSelect.value = r.namespace; setNamespace(r.namespace); }
      if (r.view !== state.view) setView(r.view);
      if (r.view === "workflows") openWorkflow(r.item);
      else openRun(r.item);
    }

    function go(ns, view, item) {
      var target = hashOf(ns, view, item);
      if (location.hash === target) route_();
      else location.hash = target;
    }

    function drawTabs() {
      clear(tabs).append(
        h("a", { href: hashOf(state.namespace, "runs", null), class: "tab" + (state.view === "runs" ? " active" : ""), "aria-current": state.view === "runs" ? "page" : null }, "Runs"),
        h("a", { href: hashOf(state.namespace, "workflows", null), class: "tab" + (state.view === "workflows" ? " active" : ""), "aria-current": state.view === "workflows" ? "page" : null }, "Workflows"));
    }

    function setNamespace(ns) {
      state.namespace = ns;
      client = httpTransport(token, ns, health);
      state.cursors = [null];
      state.page = 0;
      state.listKey = null;
      if (state.listTimer) clearInterval(state.listTimer);
      state.listTimer = setInterval(function () { if (!document.hidden && !downSince) loadCurrent(); }, 2000);
      drawTabs();
      loadCurrent();
    }

    function setView(view) {
      state.view = view;
      drawTabs();
      var main = root.querySelector("main");
      if (main) main.className = view + "-view";
      var filtersEl = root.querySelector(".filters");
      if (filtersEl) filtersEl.hidden = view !== "runs";
      pager.hidden = view !== "runs";
      if (state.panel) state.panel.stop();
      state.panel = null;
      if (state.listStop) state.listStop();
      state.listStop = null;
      state.listKey = null;
      clear(listEl);
      clear(detailEl);
      loadCurrent();
    }

    function loadCurrent() {
      if (state.view === "workflows") loadWorkflows();
      else loadList();
    }

    function refreshAll() {
      loadCurrent();
      if (state.panel) state.panel.refresh();
    }

    function openRun(task) {
      if (state.panel) state.panel.stop();
      state.panel = null;
      clear(detailEl);
      if (!task) { detailEl.append(h("p", { class: "empty" }, "Choose a run.")); return; }
      state.panel = RunPanel(detailEl, client, task, function (other) { go(state.namespace, "runs", other); });
    }

    function openWorkflow(name) {
      state.workflow = name;
      clear(detailEl);
      var w = state.workflows.filter(function (x) { return x.name === name; })[0];
      if (!name) { detailEl.append(h("p", { class: "empty" }, "Choose a Workflow.")); return; }
      if (!w) { if (state.workflowsLoaded) detailEl.append(h("p", { class: "error" }, "No Workflow " + name + " here.")); return; }
      renderWorkflow(detailEl, w, {
        client: client,
        namespace: state.namespace,
        openRun: function (task) { go(state.namespace, "runs", task); },
      });
    }

    function loadWorkflows() {
      var ns = state.namespace;
      client.callTool(TOOLS.workflows, {}).then(function (page) {
        if (ns !== state.namespace || state.view !== "workflows") return;
        notice.textContent = "";
        var before = json(state.workflows);
        state.workflows = page.workflows || [];
        var first = !state.workflowsLoaded;
        state.workflowsLoaded = true;
        renderWorkflows(listEl, state.workflows, function (name) { go(state.namespace, "workflows", name); }, state.workflow);
        // Redraw the open Workflow only when it changed, and never under a person's typing.
        var typing = detailEl.querySelector("form.start:focus-within, dialog[open]");
        if ((first || before !== json(state.workflows)) && !typing) openWorkflow(state.workflow);
      }, function (e) {
        if (e.code !== OFFLINE) notice.textContent = e.message;
      });
    }

    function onSort(column) {
      if (column.server) {
        state.sort = null;
        state.order = state.order === "newest" ? "oldest" : "newest";
        state.cursors = [null];
        state.page = 0;
      } else {
        var same = state.sort && state.sort.key === column.key;
        state.sort = { key: column.key, dir: same && state.sort.dir === "asc" ? "desc" : "asc" };
      }
      loadList();
    }

    function loadList() {
      var args = Object.assign({ limit: 20 }, state.filters);
      if (state.order === "oldest") args.order = "oldest";
      var cursor = state.cursors[state.page];
      if (cursor) args.cursor = cursor;
      var ns = state.namespace;
      // Filters change faster than the server answers: only the newest ask may draw the list,
      // and the list says it is busy until that answer came.
      var seq = state.listSeq = (state.listSeq || 0) + 1;
      listEl.setAttribute("aria-busy", "true");
      function newest() {
        if (seq !== state.listSeq) return false;
        listEl.removeAttribute("aria-busy");
        return true;
      }
      client.callTool(TOOLS.list, args).then(function (page) {
        if (!newest() || ns !== state.namespace || state.view !== "runs") return;
        notice.textContent = "";
        if (filterError) filterError.textContent = "";
        renderList(listEl, page, function (task) { go(state.namespace, "runs", task); },
          { sort: state.sort, order: state.order, onSort: onSort });
        state.cursors[state.page + 1] = page.nextCursor || null;
        clear(pager).append(
          h("button", { type: "button", disabled: state.page === 0, onclick: function () { state.page--; loadList(); } }, state.order === "oldest" ? "Older" : "Newer"),
          h("span", {}, " page " + (state.page + 1) + " "),
          h("button", { type: "button", disabled: !page.nextCursor, onclick: function () { state.page++; loadList(); } }, state.order === "oldest" ? "Newer" : "Older"));
        followList(page.runs);
      }, function (e) {
        if (!newest() || e.code === OFFLINE) return;
        // A filter the server refused says why beside the filters.
        if (e.code === -32602 && filterError) filterError.textContent = e.message;
        else notice.textContent = e.message;
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
      panel = RunPanel(root, bridge, taskId, openRun);
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
