// The leakpath UI: polls /api/status while the trace loads, then draws the
// memory chart, the flame graphs of the chosen range, the leaks and the
// heap use tables from the JSON API (see internal/render/webui/server.go).
(function () {
  "use strict";
  var $ = function (s) { return document.querySelector(s); };
  var timeline = null, range = null, flameKind = "allocated", usageBy = "library";

  function bytes(n) {
    if (n < 10000) return Number(n).toLocaleString("en-US") + " B";
    var u = ["kB", "MB", "GB", "TB"], x = n / 1000, i = 0;
    while (x >= 1000 && i < u.length - 1) { x /= 1000; i++; }
    return x.toFixed(1) + " " + u[i];
  }
  function count(n) { return Number(n).toLocaleString("en-US"); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function get(url) {
    return fetch(url).then(function (r) {
      return r.json().then(function (j) {
        if (!r.ok) throw new Error(url + ": " + (j.error || r.status));
        return j;
      });
    });
  }
  function frameText(f) {
    var name = f.function || (f.module ? f.module.split("/").pop() + "+" + f.offset : f.address);
    if (f.file) name += " (" + f.file.split("/").pop() + ":" + f.line + ")";
    return name;
  }

  function poll() {
    get("api/status").then(function (st) {
      if (st.state === "loading") {
        var frac = st.total > 0 ? st.done / st.total : 0;
        $("#loading-bar").value = frac;
        $("#loading-pct").textContent = Math.round(100 * frac) + "% of " + bytes(st.total);
        setTimeout(poll, 200);
        return;
      }
      if (st.state === "error") { $("#loading-error").textContent = st.error; return; }
      $("#title").textContent = st.title;
      $("#loading").hidden = true;
      $("#main").hidden = false;
      if (st.state === "running") { live(); return; }
      start();
    }).catch(function (e) { $("#loading-error").textContent = String(e); setTimeout(poll, 1000); });
  }

  // live shows a running program (leakpath run --ui): the chart, flame
  // graphs and diff, refreshed every second; the leaks and tables come at
  // its end.
  var liveMode = false;
  function live() {
    if (!liveMode) {
      liveMode = true;
      document.body.classList.add("live");
      $("#title").textContent += " (running)";
      bindTabs();
    }
    get("api/timeline").then(function (tl) {
      if (dragFrom !== null) return; // not under the mouse
      timeline = tl;
      drawChart();
      if (range && range[1] >= tl.buckets.length) range = null;
      setRange(range);
    }).catch(showError);
    setTimeout(function () {
      get("api/status").then(function (st) {
        if (st.state === "running") { live(); return; }
        document.body.classList.remove("live");
        $("#title").textContent = st.title;
        liveMode = false;
        start();
      });
    }, 1000);
  }

  var bound = false;
  function bindTabs() {
    if (bound) return;
    bound = true;
    document.querySelectorAll("#flame-tabs button").forEach(function (b) {
      b.addEventListener("click", function () {
        flameKind = b.dataset.kind;
        document.querySelectorAll("#flame-tabs button").forEach(function (x) { x.classList.toggle("active", x === b); });
        loadFlame();
      });
    });
    document.querySelectorAll("#usage-tabs button").forEach(function (b) {
      b.addEventListener("click", function () {
        usageBy = b.dataset.by;
        document.querySelectorAll("#usage-tabs button").forEach(function (x) { x.classList.toggle("active", x === b); });
        loadUsage();
      });
    });
    $("#range-reset").addEventListener("click", function () { setRange(null); });
    window.addEventListener("resize", drawChart);
  }

  function start() {
    bindTabs();
    get("api/timeline").then(function (tl) {
      timeline = tl;
      drawChart();
      setRange(null);
    }).catch(showError);
    get("api/report").then(function (rep) { drawLeaks(rep); drawTypes(rep); }).catch(showError);
    loadUsage();
  }
  function showError(e) { document.body.appendChild(el("pre", "error", String(e))); }

  // The chart: heap in use (the highest of each bucket) as an area, the
  // allocation rate as bars on an axis of its own; drag to choose a range.
  var SVG = "http://www.w3.org/2000/svg";
  var dragFrom = null, mouseUp = null; // a drag on the chart
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function drawChart() {
    var box = $("#chart"), bs = timeline.buckets;
    box.textContent = "";
    var W = box.clientWidth || 800, H = 220, L = 70, R = 70, T = 10, B = 24;
    var s = svg("svg", {width: W, height: H, id: "chart-svg"});
    var n = Math.max(bs.length, 1), pw = (W - L - R) / n;
    var maxHeap = 1, maxRate = 1, peak = 0, alloc = 0;
    bs.forEach(function (b) {
      maxHeap = Math.max(maxHeap, b.heap_max); maxRate = Math.max(maxRate, b.alloc_bytes);
      peak = Math.max(peak, b.heap_max); alloc += b.alloc_bytes;
    });
    s.dataset.peakBytes = peak;
    s.dataset.allocBytes = alloc;
    s.dataset.buckets = bs.length;
    var y = function (v, m) { return T + (H - T - B) * (1 - v / m); };
    bs.forEach(function (b, i) {
      if (b.alloc_bytes > 0) {
        s.appendChild(svg("rect", {x: L + i * pw, y: y(b.alloc_bytes, maxRate), width: Math.max(pw - 0.5, 0.5),
          height: H - B - y(b.alloc_bytes, maxRate), fill: "#f0a040", "fill-opacity": 0.6, class: "rate"}));
      }
    });
    var d = "M" + L + "," + y(0, maxHeap);
    bs.forEach(function (b, i) { d += " L" + (L + i * pw) + "," + y(b.heap_max, maxHeap) + " L" + (L + (i + 1) * pw) + "," + y(b.heap_max, maxHeap); });
    d += " L" + (L + n * pw) + "," + y(0, maxHeap) + " Z";
    s.appendChild(svg("path", {d: d, fill: "#3a78c3", "fill-opacity": 0.45, stroke: "#3a78c3", class: "heap"}));
    // Axes: heap on the left, rate on the right, time below.
    var unit = timeline.unit, width = timeline.width;
    function text(x, yy, str, anchor, cls) {
      var t = svg("text", {x: x, y: yy, "font-size": 11, "text-anchor": anchor || "start", fill: "#333"});
      if (cls) t.setAttribute("class", cls);
      t.textContent = str;
      s.appendChild(t);
    }
    s.appendChild(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888"}));
    text(L - 4, y(maxHeap, maxHeap) + 10, bytes(maxHeap), "end", "axis-heap");
    text(L - 4, H - B, "0", "end");
    var rateUnit = unit === "s" ? "/s" : "/tick";
    text(W - R + 4, y(maxRate, maxRate) + 10, bytes(Math.round(maxRate / (width || 1))) + rateUnit, "start", "axis-rate");
    for (var k = 0; k <= 4; k++) {
      var i = Math.round(k * n / 4);
      text(L + i * pw, H - 8, (i * width).toPrecision(3) + " " + unit, k === 0 ? "start" : k === 4 ? "end" : "middle");
    }
    // The selected range, and dragging to choose one.
    var sel = svg("rect", {y: T, height: H - T - B, fill: "#000", "fill-opacity": 0.12, id: "chart-range", visibility: "hidden"});
    s.appendChild(sel);
    function bucketAt(ev) {
      var r = s.getBoundingClientRect();
      return Math.max(0, Math.min(n - 1, Math.floor((ev.clientX - r.left - L) / pw)));
    }
    function show(a, b) {
      sel.setAttribute("x", L + Math.min(a, b) * pw);
      sel.setAttribute("width", (Math.abs(b - a) + 1) * pw);
      sel.setAttribute("visibility", "visible");
    }
    s.addEventListener("mousedown", function (ev) { dragFrom = bucketAt(ev); show(dragFrom, dragFrom); ev.preventDefault(); });
    s.addEventListener("mousemove", function (ev) { if (dragFrom !== null) show(dragFrom, bucketAt(ev)); });
    if (mouseUp) window.removeEventListener("mouseup", mouseUp);
    mouseUp = function (ev) {
      if (dragFrom === null) return;
      var to = bucketAt(ev), a = Math.min(dragFrom, to), b = Math.max(dragFrom, to);
      dragFrom = null;
      setRange([a, b]);
    };
    window.addEventListener("mouseup", mouseUp);
    if (range) show(range[0], range[1]);
    box.appendChild(s);
  }

  // setRange selects buckets r[0]..r[1] (null: all) and redraws what
  // depends on the range.
  function setRange(r) {
    var bs = timeline.buckets;
    range = r;
    var a = r ? r[0] : 0, b = r ? r[1] : bs.length - 1;
    var sel = $("#chart-range");
    if (!r && sel) sel.setAttribute("visibility", "hidden");
    var w = timeline.width, u = timeline.unit;
    $("#range").textContent = r ? (a * w).toPrecision(3) + " – " + ((b + 1) * w).toPrecision(3) + " " + u + " (buckets " + a + "–" + b + ")" : "whole trace";
    var alloc = 0, allocs = 0, frees = 0, peak = 0, temp = 0, leaked = 0;
    for (var i = a; i <= b && i < bs.length; i++) {
      alloc += bs[i].alloc_bytes; allocs += bs[i].allocs; frees += bs[i].frees;
      peak = Math.max(peak, bs[i].heap_max); temp += bs[i].temporary; leaked += bs[i].leaked_bytes;
    }
    var sum = $("#range-summary");
    sum.textContent = "";
    [["allocated", bytes(alloc), alloc], ["allocations", count(allocs), allocs], ["frees", count(frees), frees],
     ["peak heap in use", bytes(peak), peak], ["temporary allocations", count(temp), temp], ["still leaked at the end", bytes(leaked), leaked]]
      .forEach(function (x) {
        var s = el("span", "stat");
        s.dataset.name = x[0];
        s.dataset.value = x[2];
        s.textContent = x[0] + ": " + x[1];
        sum.appendChild(s);
        sum.appendChild(document.createTextNode("  "));
      });
    loadFlame();
    loadDiff();
  }

  // The snapshot diff of the range: the heap at its start against its end.
  var diffSeq = 0;
  function loadDiff() {
    var seq = ++diffSeq, q = "api/diff";
    if (range) q += "?from=" + range[0] + "&to=" + range[1];
    get(q).then(function (d) {
      if (seq !== diffSeq) return;
      var sign = function (n) { return (n > 0 ? "+" : n < 0 ? "−" : "") + bytes(Math.abs(n)); };
      var sum = $("#diff-summary");
      sum.dataset.change = d.change;
      sum.textContent = "heap in use changed by " + sign(d.change) + " over the range" + (d.rows.length ? "" : ": no site changed");
      var body = $("#diff tbody");
      body.textContent = "";
      d.rows.slice(0, 30).forEach(function (r) {
        var tr = el("tr", "diff-row");
        tr.dataset.change = r.change;
        var td = el("td", "", r.stack.slice(-3).reverse().join(" ← "));
        td.title = r.stack.slice().reverse().join("\n");
        tr.appendChild(td);
        tr.appendChild(el("td", "num", bytes(r.before)));
        tr.appendChild(el("td", "num", bytes(r.after)));
        tr.appendChild(el("td", "num " + (r.change > 0 ? "grew" : "shrank"), sign(r.change)));
        body.appendChild(tr);
      });
    }).catch(showError);
  }

  var flameSeq = 0;
  function loadFlame() {
    var seq = ++flameSeq, q = "api/flame?kind=" + flameKind;
    if (range) q += "&from=" + range[0] + "&to=" + range[1];
    get(q).then(function (f) {
      if (seq !== flameSeq) return; // a newer one is on its way
      var cap = {allocated: "bytes allocated in the range, by stack",
        leaked: "bytes allocated in the range and never freed, by stack",
        peak: "bytes in use, by stack, at the end of the bucket where the heap peaked in the range" + (f.peak !== undefined ? " (bucket " + f.peak + ")" : ""),
        temporary: "temporary allocations (freed with no other allocation in between) in the range, by stack",
        growth: "bytes in use at the end of the range minus at its start, by stack (the sites that grew)"}[f.kind];
      $("#flame-caption").textContent = cap + (f.pruned ? " (" + count(f.pruned) + " small frames left out)" : "");
      var box = $("#flame");
      box.dataset.kind = f.kind;
      box.dataset.total = f.root.v;
      flameGraph(box, f.root, {unit: f.unit});
    }).catch(showError);
  }

  // The leak list; a click shows the stack, the source line and the root
  // cause, highlighted.
  var leakRows = [];
  // The type table of a typed scan (run --types), and a type's path to root.
  function drawTypes(rep) {
    var imgs = rep.processes && rep.processes.length ? rep.processes : [rep];
    var ty = null;
    imgs.forEach(function (p) { if (!ty && p.types) ty = p.types; });
    if (!ty) return;
    $("#types-section").hidden = false;
    $("#types-summary").textContent = bytes(ty.typed_bytes) + " of " + bytes(ty.total_bytes) + " live typed";
    var body = $("#types tbody");
    body.textContent = "";
    (ty.types || []).forEach(function (t) {
      var tr = el("tr", "type");
      tr.dataset.name = t.name;
      tr.appendChild(el("td", t.unknown ? "unknown" : "", t.name));
      tr.appendChild(el("td", "num", bytes(t.bytes)));
      tr.appendChild(el("td", "num", count(t.blocks)));
      tr.appendChild(el("td", "", Object.keys(t.blocks_by_evidence || {}).join(", ")));
      tr.appendChild(el("td", "", (t.held_by || []).slice(0, 3).map(function (h) { return h.holder; }).join(", ")));
      tr.appendChild(el("td", "num", bytes(t.largest_retained_bytes || 0)));
      if (!t.unknown) tr.addEventListener("click", function () { showTypePath(t.name); });
      body.appendChild(tr);
    });
  }
  function showTypePath(name) {
    var box = $("#type-path");
    box.textContent = "";
    get("api/path?type=" + encodeURIComponent(name)).then(function (p) {
      box.appendChild(el("h3", "", "Path to root of " + p.type));
      if (!p.steps.length) { box.appendChild(el("p", "", "no root reaches it")); return; }
      var ol = box.appendChild(el("ol", "path"));
      p.steps.forEach(function (s) {
        ol.appendChild(el("li", "step", (s.via || "") + " → " + (s.type || "?") + " at " + s.address +
          " (" + bytes(s.bytes) + ", retains " + bytes(s.retained_bytes) + ")"));
      });
    }).catch(function (e) { box.appendChild(el("p", "error", String(e))); });
  }

  function drawLeaks(rep) {
    var leaks = [];
    var imgs = rep.processes && rep.processes.length ? rep.processes : [rep];
    imgs.forEach(function (p) { (p.leaks || []).forEach(function (l) { l._pid = p.pid; leaks.push(l); }); });
    var t = rep.totals || {};
    $("#summary").innerHTML = "";
    [["allocations", count(t.allocations || 0)], ["allocated", bytes(t.allocated_bytes || 0)], ["peak", bytes(t.peak_bytes || 0)],
     ["leaked", bytes(t.leaked_bytes || 0) + " in " + count(t.leaked_blocks || 0) + " blocks"]].forEach(function (x) {
      $("#summary").appendChild(el("span", "", x[0] + ": " + x[1]));
    });
    var body = $("#leaks tbody");
    body.textContent = "";
    if (!leaks.length) { body.appendChild(el("tr")).appendChild(el("td", "", "no leaks")).colSpan = 6; }
    leaks.forEach(function (l, i) {
      var tr = el("tr", "leak");
      tr.dataset.index = i;
      tr.dataset.bytes = l.bytes;
      tr.dataset.blocks = l.blocks;
      tr.appendChild(el("td", "kind kind-" + l.kind, l.kind + (l.suppressed ? " (suppressed)" : "")));
      tr.appendChild(el("td", "num", bytes(l.bytes)));
      tr.appendChild(el("td", "num", count(l.blocks)));
      tr.appendChild(el("td", "", l.function || ""));
      var top = programFrame(l.stack);
      tr.appendChild(el("td", "", top ? frameText(top) : ""));
      tr.appendChild(el("td", "", l.root_cause ? l.root_cause.status.replace(/_/g, " ") : ""));
      tr.addEventListener("click", function () { showLeak(l, tr); });
      body.appendChild(tr);
      leakRows.push(tr);
    });
  }
  // programFrame is the innermost frame with a source line outside the C
  // and C++ runtimes and the loader, else the first.
  function programFrame(st) {
    st = st || [];
    for (var i = 0; i < st.length; i++) {
      if (st[i].file && !/\/(libc|libstdc\+\+|ld-linux|libleakpath)[^/]*$/.test(st[i].module || "")) return st[i];
    }
    return st[0];
  }
  function source(f, into) {
    if (!f || !f.file || !f.line) return;
    get("api/source?file=" + encodeURIComponent(f.file) + "&line=" + f.line).then(function (lines) {
      var pre = el("div", "src");
      lines.forEach(function (ln) {
        var s = el("span", ln.n === f.line ? "hl" : "", String(ln.n).padStart(5) + "  " + ln.text);
        pre.appendChild(s);
        pre.appendChild(document.createTextNode("\n"));
      });
      into.appendChild(pre);
    }).catch(function () {});
  }
  function showLeak(l, tr) {
    leakRows.forEach(function (r) { r.classList.toggle("selected", r === tr); });
    var d = $("#leak-detail");
    d.textContent = "";
    d.appendChild(el("h3", "", l.kind + " leak: " + bytes(l.bytes) + " in " + count(l.blocks) + " blocks" +
      (l.site_allocations ? " (of " + count(l.site_allocations) + " allocated here)" : "")));
    var rc = l.root_cause, rcFuncs = {};
    if (rc) {
      var box = el("div", "root-cause");
      box.id = "root-cause";
      box.dataset.status = rc.status;
      box.appendChild(el("h3", "", "Root cause: " + rc.status.replace(/_/g, " ") + (rc.note ? " (" + rc.note + ")" : "")));
      if (rc.functions && rc.functions.length) {
        rc.functions.forEach(function (f) { rcFuncs[f.function] = true; });
        box.appendChild(el("div", "rc-functions", "in " + rc.functions.map(frameText).join(", ")));
      }
      (rc.branches || []).forEach(function (b, i) {
        var taken = rc.leaks_when_taken && rc.leaks_when_taken[i];
        var to = rc.leak_targets && rc.leak_targets[i];
        var line = el("div", "branch leaks", "leaks when the branch at " + frameText(b) +
          (to && to.address !== "0x0" && to.function ? " goes to " + frameText(to) : "") + " (jump " + (taken ? "taken" : "not taken") + ")");
        box.appendChild(line);
        source(b, box);
      });
      if (rc.traced_runs) {
        box.appendChild(el("div", "rc-runs", "traced " + rc.traced_runs + " executions: " + rc.freed_runs + " freed, " + rc.leaked_runs + " leaked"));
      }
      d.appendChild(box);
    }
    d.appendChild(el("div", "", "allocated at:"));
    var ul = el("ul", "stack");
    (l.stack || []).forEach(function (f) {
      ul.appendChild(el("li", rcFuncs[f.function] ? "rc-frame" : "", frameText(f)));
    });
    d.appendChild(ul);
    source(programFrame(l.stack), d);
    if (l.owner) {
      d.appendChild(el("div", "", "held by a definite leak allocated at: " + l.owner.slice(0, 4).map(frameText).join(" ← ")));
    }
  }

  function loadUsage() {
    get("api/usage?by=" + usageBy).then(function (u) {
      var units = u.units || [];
      (u.processes || []).slice(1).forEach(function (p) { units = units.concat(p.units || []); });
      var body = $("#usage tbody");
      body.textContent = "";
      units.slice(0, 200).forEach(function (x) {
        var tr = el("tr", "unit");
        tr.dataset.name = x.name;
        tr.dataset.allocated = x.allocated_bytes;
        tr.appendChild(el("td", "", x.name + (x.thread_name ? " (" + x.thread_name + ")" : "")));
        tr.appendChild(el("td", "num", bytes(x.current_bytes)));
        tr.appendChild(el("td", "num", bytes(x.max_bytes)));
        tr.appendChild(el("td", "num", bytes(x.allocated_bytes)));
        tr.appendChild(el("td", "num", count(x.allocated_blocks)));
        tr.appendChild(el("td", "num", bytes(x.freed_bytes)));
        body.appendChild(tr);
      });
      if (!units.length) body.appendChild(el("tr")).appendChild(el("td", "", "no units")).colSpan = 6;
    }).catch(showError);
  }

  poll();
})();
