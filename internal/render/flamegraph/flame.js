// flameGraph draws root (a tree of {n: name, v: value, c: [children]})
// into el as an icicle (callers above callees), widths proportional to
// the values. Click a frame to zoom into it, click a caller above to zoom
// out; hover shows the frame, its value and its share; the search box
// highlights matching frames and sums their values. opts.unit is "bytes"
// or "blocks". Returns {zoom(node), search(text)} for the page's own use.
function flameGraph(el, root, opts) {
  "use strict";
  opts = opts || {};
  var unit = opts.unit || "bytes";
  var rowH = 18, minShare = 0.0005, maxNodes = 6000;
  el.classList.add("flame");
  el.textContent = "";
  var bar = document.createElement("div");
  bar.className = "flame-bar";
  var input = document.createElement("input");
  input.type = "search";
  input.placeholder = "search functions (substring or /regexp/)";
  input.className = "flame-search";
  var reset = document.createElement("button");
  reset.textContent = "reset zoom";
  var status = document.createElement("span");
  status.className = "flame-status";
  bar.appendChild(input);
  bar.appendChild(reset);
  bar.appendChild(status);
  var chart = document.createElement("div");
  chart.className = "flame-chart";
  var tip = document.createElement("div");
  tip.className = "flame-tip";
  tip.style.display = "none";
  el.appendChild(bar);
  el.appendChild(chart);
  el.appendChild(tip);

  // Parent links and depths, once.
  var parent = new Map();
  (function link(n) {
    var st = [n];
    while (st.length) {
      var x = st.pop();
      (x.c || []).forEach(function (c) { parent.set(c, x); st.push(c); });
    }
  })(root);

  function fmt(v) {
    if (unit !== "bytes") return v.toLocaleString("en-US") + " blocks";
    if (v < 10000) return v.toLocaleString("en-US") + " B";
    var u = ["kB", "MB", "GB", "TB"], x = v / 1000, i = 0;
    while (x >= 1000 && i < u.length - 1) { x /= 1000; i++; }
    return x.toFixed(1) + " " + u[i];
  }
  function pct(v, of) { return of ? (100 * v / of).toFixed(2) + "%" : "0%"; }
  function hue(name) {
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return "hsl(" + (10 + h % 40) + ",80%," + (55 + h % 15) + "%)";
  }

  var focus = root, matcher = null;
  function matches(n) { return matcher !== null && matcher(n.n); }

  function draw() {
    chart.textContent = "";
    var rows = 0, count = 0, matched = 0;
    var frag = document.createDocumentFragment();
    function box(n, depth, x, w, ancestor) {
      var d = document.createElement("div");
      d.className = "flame-frame" + (ancestor ? " flame-ancestor" : "") + (matches(n) ? " flame-match" : "");
      d.style.left = (100 * x) + "%";
      d.style.width = (100 * w) + "%";
      d.style.top = (depth * rowH) + "px";
      d.style.background = matches(n) ? "" : hue(n.n);
      d.dataset.name = n.n;
      d.dataset.value = n.v;
      d.textContent = n.n;
      d._node = n;
      frag.appendChild(d);
      count++;
      if (depth + 1 > rows) rows = depth + 1;
    }
    // The focus's callers, full width above it.
    var chain = [], p = focus;
    while (p !== root) { p = parent.get(p); chain.unshift(p); }
    chain.forEach(function (a, i) { box(a, i, 0, 1, true); });
    var base = chain.length, total = focus.v || 1;
    var queue = [[focus, base, 0]];
    while (queue.length && count < maxNodes) {
      var it = queue.shift(), n = it[0], depth = it[1], x = it[2];
      var w = n.v / total;
      if (w < minShare) continue;
      box(n, depth, x, w, false);
      if (matches(n)) { matched += n.v; }
      var cx = x;
      (n.c || []).forEach(function (c) {
        queue.push([c, depth + 1, cx]);
        cx += c.v / total;
      });
    }
    chart.appendChild(frag);
    chart.style.height = (rows * rowH + 2) + "px";
    if (matcher !== null) {
      // Matched frames may nest: count each stack's value once.
      status.textContent = "matched " + fmt(sumMatched(focus)) + " (" + pct(sumMatched(focus), root.v) + " of all)";
    } else {
      status.textContent = "total " + fmt(root.v) + (focus !== root ? "; zoomed on " + focus.n + ": " + fmt(focus.v) : "");
    }
  }
  function sumMatched(n) {
    if (matches(n)) return n.v;
    var s = 0;
    (n.c || []).forEach(function (c) { s += sumMatched(c); });
    return s;
  }

  chart.addEventListener("click", function (e) {
    var d = e.target.closest(".flame-frame");
    if (d) zoom(d._node);
  });
  chart.addEventListener("mousemove", function (e) {
    var d = e.target.closest(".flame-frame");
    if (!d) { tip.style.display = "none"; return; }
    var n = d._node;
    tip.textContent = n.n + "\n" + fmt(n.v) + " — " + pct(n.v, root.v) + " of all" +
      (focus !== root ? ", " + pct(n.v, focus.v) + " of " + focus.n : "");
    tip.style.display = "block";
    var r = el.getBoundingClientRect();
    tip.style.left = Math.min(e.clientX - r.left + 12, el.clientWidth - 320) + "px";
    tip.style.top = (e.clientY - r.top + 16) + "px";
  });
  chart.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  reset.addEventListener("click", function () { zoom(root); });
  input.addEventListener("input", function () { search(input.value); });

  function zoom(n) { focus = n || root; draw(); }
  function search(text) {
    matcher = null;
    if (text) {
      var m = /^\/(.*)\/$/.exec(text);
      if (m) {
        try { var re = new RegExp(m[1]); matcher = function (s) { return re.test(s); }; }
        catch (err) { status.textContent = "bad regexp: " + err.message; return; }
      } else {
        matcher = function (s) { return s.indexOf(text) >= 0; };
      }
    }
    draw();
  }
  if (!root.v) {
    chart.textContent = "nothing to show: the value is 0 everywhere";
    chart.className += " flame-empty";
    return {zoom: function () {}, search: function () {}};
  }
  draw();
  return {zoom: zoom, search: search};
}
