// The panel as a find-my (docs/panel.md, "The map first"): named pins that show freshness and
// battery, the sheet over the map on a phone, stays drawn on the map, the time slider, and "at
// <geofence>" for the card and the stays. panel.js (loaded after this file) owns the page's data
// and calls these; nothing here fetches anything. Every name is put in as text, never as HTML.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function byId(id) { return document.getElementById(id); }

  function span(className, text) {
    var element = document.createElement("span");
    element.className = className;
    if (text !== undefined) { element.textContent = text; }
    return element;
  }

  // A position's age as the pin's look: live under 5 minutes, then minutes, hours, days.
  var ageClasses = ["age-live", "age-minutes", "age-hours", "age-days"];
  function ageClass(seconds) {
    if (seconds < 300) { return "age-live"; }
    if (seconds < 3600) { return "age-minutes"; }
    if (seconds < 86400) { return "age-hours"; }
    return "age-days";
  }

  function ageWords(seconds) {
    if (seconds < 300) { return "live"; }
    if (seconds < 5400) { return Math.round(seconds / 60) + " min"; }
    if (seconds < 129600) { return Math.round(seconds / 3600) + " h"; }
    return Math.round(seconds / 86400) + " days";
  }

  // The app a device reports with says what it is; anything else is a plain dot.
  function platformKind(platform) {
    var name = String(platform || "").toLowerCase();
    if (/^(ios|android|owntracks|overland|gpslogger|osmand|traccar|phone)/.test(name)) { return "phone"; }
    if (/^(linux|macos|windows|laptop|agent|findmy-agent)/.test(name)) { return "laptop"; }
    if (/watch/.test(name)) { return "watch"; }
    return "other";
  }

  function initials(name) {
    var words = String(name).split(/\s+/).filter(function (word) { return /\w/.test(word); });
    var letters = words.slice(0, 2).map(function (word) { return word.replace(/^\W+/, "").charAt(0); }).join("");
    return (letters || String(name).charAt(0) || "?").toUpperCase();
  }

  var lowPercent = 15;

  // What a device's pin and its title say now. `nowMillis` is the server's clock.
  function facts(device, nowMillis) {
    var fix = device.latest;
    var seconds = Math.max(0, Math.round((nowMillis - Date.parse(fix.recorded_at)) / 1000));
    var heard = device.last_heard ? Date.parse(device.last_heard) : Date.parse(fix.recorded_at);
    var lastKnown = !!device.paused || (nowMillis - heard) / 1000 > (device.stale_after_s || 3600);
    var battery = fix.battery_pct;
    return {
      age: ageClass(seconds), words: ageWords(seconds), lastKnown: lastKnown, lost: !!device.lost,
      low: battery !== null && battery !== undefined && battery < lowPercent,
      charging: fix.is_charging === true, battery: battery,
      unknownAccuracy: !(fix.accuracy_m > 0)
    };
  }

  function pinTitle(device, said) {
    var parts = [device.name, said.words === "live" ? "live" : said.words + " ago"];
    if (said.battery !== null && said.battery !== undefined) {
      parts.push("battery " + said.battery + " %" + (said.low ? " (low)" : "") + (said.charging ? ", charging" : ""));
    }
    if (said.lastKnown) { parts.push("last known position"); }
    if (said.lost) { parts.push("marked lost"); }
    if (said.unknownAccuracy) { parts.push("accuracy unknown"); }
    return parts.join(" · ");
  }

  // The pin: platform glyph, name (initials when crowded), and a line of what matters now.
  function pin(device) {
    var root = document.createElement("div");
    root.className = "pin";
    root.appendChild(span("pin-glyph"));
    var label = span("pin-label");
    label.appendChild(span("pin-name", device.name));
    label.appendChild(span("pin-initials", initials(device.name)));
    root.appendChild(label);
    root.appendChild(span("pin-facts"));
    return root;
  }

  function decorate(root, device, nowMillis, selected) {
    var said = facts(device, nowMillis);
    ageClasses.forEach(function (name) { root.classList.toggle(name, name === said.age); });
    root.classList.toggle("battery-low", said.low);
    root.classList.toggle("charging", said.charging);
    root.classList.toggle("last-known", said.lastKnown);
    root.classList.toggle("lost", said.lost);
    root.classList.toggle("selected", !!selected);
    root.firstChild.className = "pin-glyph platform-" + platformKind(device.platform);
    var line = [];
    if (said.lost) { line.push("lost"); }
    if (said.lastKnown) { line.push("last known"); }
    if (said.words !== "live") { line.push(said.words); }
    if (said.low || said.charging) {
      line.push((said.charging ? "⚡" : "") + (said.battery !== null && said.battery !== undefined ? said.battery + " %" : ""));
    }
    var factsElement = root.lastChild;
    factsElement.textContent = line.join(" · ");
    factsElement.hidden = line.length === 0;
    return pinTitle(device, said);
  }

  // Names of pins that would overlap become initials: a grid of label-sized cells, each pin
  // compared with the pins of its own and the neighbouring cells. Past `crowdPinsMax` pins on
  // screen every pin is initials (the clusters hold the rest).
  var cellWidth = 120, cellHeight = 40, crowdPinsMax = 300;
  function crowd(map, markers) {
    var shown = [];
    Object.keys(markers).forEach(function (id) {
      var marker = markers[id];
      if (map.hasLayer(marker) && marker.findmyPin) {
        shown.push({ pin: marker.findmyPin, point: map.latLngToContainerPoint(marker.getLatLng()) });
      }
    });
    var cells = {};
    shown.forEach(function (entry) {
      var key = Math.floor(entry.point.x / cellWidth) + ":" + Math.floor(entry.point.y / cellHeight);
      (cells[key] = cells[key] || []).push(entry);
    });
    shown.forEach(function (entry) {
      var near = shown.length > crowdPinsMax;
      var cx = Math.floor(entry.point.x / cellWidth), cy = Math.floor(entry.point.y / cellHeight);
      for (var dx = -1; dx <= 1 && !near; dx += 1) {
        for (var dy = -1; dy <= 1 && !near; dy += 1) {
          (cells[(cx + dx) + ":" + (cy + dy)] || []).forEach(function (other) {
            if (other !== entry && Math.abs(other.point.x - entry.point.x) < cellWidth &&
                Math.abs(other.point.y - entry.point.y) < cellHeight) { near = true; }
          });
        }
      }
      entry.pin.classList.toggle("crowded", near);
    });
  }

  // The sheet's state is the URL's `sheet` (no parameter: the default, half), and every panel
  // link on the page carries it, so a reload, a bookmark and the back button keep it.
  function withParameter(href, name, value) {
    var url = new URL(href, window.location.href);
    if (value === null) { url.searchParams.delete(name); } else { url.searchParams.set(name, value); }
    return url.pathname + url.search + url.hash;
  }

  function remember(name, value) {
    // The default, in a URL without the parameter: the server's links lack it too, and there is
    // nothing to rewrite (a thousand devices' links on every load).
    if (value === null && !new URL(window.location.href).searchParams.has(name)) { return; }
    window.history.replaceState(window.history.state, "", withParameter(window.location.href, name, value));
    document.querySelectorAll("a[href^='/find-my?'], a[href='/find-my']").forEach(function (link) {
      link.setAttribute("href", withParameter(link.getAttribute("href"), name, value));
    });
    // A card's form carries it too: its answer leads back to the panel with the same state.
    document.querySelectorAll("form input[type='hidden'][name='" + name + "']").forEach(function (input) {
      input.value = value === null ? "half" : value;
    });
  }

  function link(href) {
    var state = new URL(window.location.href).searchParams.get("sheet");
    return state ? withParameter(href, "sheet", state) : href;
  }

  // The sheet over the map on a phone: dragged by its bar (snapping to peek, half or full on
  // release) or toggled by its button, which is how a keyboard works it.
  function sheet(onChange) {
    var element = byId("sheet"), toggle = byId("sheet-toggle");
    if (!element || !toggle) { return; }
    toggle.hidden = false;
    function set(name) {
      element.setAttribute("data-state", name);
      element.style.height = "";
      toggle.setAttribute("aria-expanded", name === "full" ? "true" : "false");
      toggle.textContent = name === "full" ? "Collapse the list" : "Expand the list";
      remember("sheet", name === "half" ? null : name);
      if (onChange) { onChange(name); }
    }
    set(element.getAttribute("data-state") || "half");
    toggle.addEventListener("click", function () {
      set(element.getAttribute("data-state") === "full" ? "peek" : "full");
    });
    var bar = element.querySelector(".sheet-bar"), drag = null;
    bar.addEventListener("pointerdown", function (event) {
      if (event.target === toggle) { return; }
      drag = { y: event.clientY, height: element.getBoundingClientRect().height };
      bar.setPointerCapture(event.pointerId);
    });
    bar.addEventListener("pointermove", function (event) {
      if (!drag) { return; }
      element.style.height = Math.max(48, drag.height + drag.y - event.clientY) + "px";
    });
    function release() {
      if (!drag) { return; }
      drag = null;
      var height = element.getBoundingClientRect().height, view = window.innerHeight;
      var stops = { peek: 0.12 * view, half: 0.45 * view, full: 0.85 * view };
      var nearest = Object.keys(stops).reduce(function (best, name) {
        return Math.abs(stops[name] - height) < Math.abs(stops[best] - height) ? name : best;
      }, "half");
      set(nearest);
    }
    bar.addEventListener("pointerup", release);
    bar.addEventListener("pointercancel", release);
  }

  // How much of the map's lower part the sheet covers: the bottom padding of a fit.
  function sheetOverlap() {
    var element = byId("sheet"), map = byId("map");
    if (!element || !map || window.getComputedStyle(element).position !== "absolute") { return 0; }
    var covered = map.getBoundingClientRect().bottom - element.getBoundingClientRect().top;
    return Math.max(0, covered);
  }

  var radiusMeters = 6371008.8;
  function distance(aLat, aLng, bLat, bLng) {
    var toRad = Math.PI / 180;
    var dLat = (bLat - aLat) * toRad, dLng = (bLng - aLng) * toRad;
    var h = Math.sin(dLat / 2) * Math.sin(dLat / 2) +
      Math.cos(aLat * toRad) * Math.cos(bLat * toRad) * Math.sin(dLng / 2) * Math.sin(dLng / 2);
    return 2 * radiusMeters * Math.asin(Math.min(1, Math.sqrt(h)));
  }

  // The geofence a circle lies wholly inside, as the server decides transitions; an unknown
  // accuracy is inside nothing.
  function fenceAround(fences, latitude, longitude, accuracy) {
    if (!(accuracy > 0)) { return null; }
    var inside = fences.filter(function (fence) {
      return distance(latitude, longitude, fence.latitude, fence.longitude) + accuracy <= fence.radius_m;
    });
    inside.sort(function (a, b) { return a.radius_m - b.radius_m; });
    return inside.length ? inside[0] : null;
  }

  // "at Home" on the card and on the stays, from the reader's geofences the page already loaded.
  function places(fences, selected, segments) {
    var row = byId("at-place");
    if (row && selected && selected.latest) {
      var fix = selected.latest;
      var fence = fenceAround(fences, fix.latitude, fix.longitude, fix.accuracy_m);
      row.textContent = fence ? "at " + fence.name : "";
      document.querySelectorAll(".at-place").forEach(function (element) { element.hidden = !fence; });
    }
    (segments || []).forEach(function (segment, index) {
      var item = document.querySelector("#stays li[data-segment='" + index + "'] .stay-place");
      if (!item || segment.type !== "stay") { return; }
      var around = fenceAround(fences, segment.latitude, segment.longitude, Math.max(segment.radius_m, 1));
      item.textContent = around ? "at " + around.name + " " : "";
    });
  }

  // Stays as circles on `renderer` (the canvas of the track's dots: a month holds hundreds of
  // stays), each listed row showing its own on focus; the moves are the track itself. A circle's
  // tooltip is made when it is first shown.
  function drawStays(state, segments, localTime, renderer) {
    state.stays = [];
    var bySegment = {}, circles = L.featureGroup();
    function show(circle) {
      if (!circle.getTooltip()) {
        circle.bindTooltip("Stayed " + localTime(circle.findmyStay.start) + " – " + localTime(circle.findmyStay.end));
      }
      circle.openTooltip();
    }
    (segments || []).forEach(function (segment, index) {
      if (segment.type !== "stay") { return; }
      var circle = L.circle([segment.latitude, segment.longitude], {
        radius: Math.max(segment.radius_m, 10), color: "#1a7f37", weight: 2, fillOpacity: 0.12, renderer: renderer
      });
      circle.findmyStay = segment;
      circles.addLayer(circle);
      state.stays.push(circle);
      bySegment[index] = circle;
    });
    circles.on("mouseover", function (event) { show(event.layer); });
    circles.addTo(state.map);
    var list = byId("stays");
    if (!list) { return; }
    function circleOf(event) {
      var item = event.target.closest && event.target.closest("li[data-segment]");
      return item ? bySegment[item.getAttribute("data-segment")] : undefined;
    }
    list.addEventListener("focusin", function (event) { var circle = circleOf(event); if (circle) { show(circle); } });
    list.addEventListener("focusout", function (event) { var circle = circleOf(event); if (circle) { circle.closeTooltip(); } });
  }

  // Where the device was at `millis`: between the two fixes around it, in proportion of time.
  function positionAt(track, times, millis) {
    var low = 0, high = times.length - 1;
    if (millis <= times[0]) { return [track[0].latitude, track[0].longitude]; }
    if (millis >= times[high]) { return [track[high].latitude, track[high].longitude]; }
    while (high - low > 1) {
      var middle = (low + high) >> 1;
      if (times[middle] <= millis) { low = middle; } else { high = middle; }
    }
    var span = times[high] - times[low], f = span > 0 ? (millis - times[low]) / span : 0;
    return [track[low].latitude + (track[high].latitude - track[low].latitude) * f,
      track[low].longitude + (track[high].longitude - track[low].longitude) * f];
  }

  // The time slider: its value is seconds since the range's first fix drawn; a marker shows where
  // the device was then, and the label says when.
  function scrubber(state, track, localTime) {
    var box = byId("scrub"), input = byId("track-slider"), output = byId("scrub-time");
    if (!box || !input || !track || track.length < 2 || !state.map) { return; }
    var times = track.map(function (fix) { return Date.parse(fix.recorded_at); });
    var first = times[0];
    input.min = "0";
    input.max = String(Math.max(1, Math.round((times[times.length - 1] - first) / 1000)));
    input.value = input.max;
    state.scrubMarker = L.marker(positionAt(track, times, times[times.length - 1]), {
      icon: L.divIcon({ className: "scrub-pin", iconSize: [18, 18] }), keyboard: false, interactive: false,
      zIndexOffset: 2000
    }).addTo(state.map);
    function show() {
      var millis = first + Number(input.value) * 1000;
      state.scrubMarker.setLatLng(positionAt(track, times, millis));
      output.textContent = localTime(new Date(millis).toISOString());
    }
    input.addEventListener("input", show);
    show();
    box.hidden = false;
  }

  window.findmyMap = {
    pin: pin, decorate: decorate, crowd: crowd, sheet: sheet, sheetOverlap: sheetOverlap, link: link,
    places: places, drawStays: drawStays, scrubber: scrubber, platformKind: platformKind
  };
})();
