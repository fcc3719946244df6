(function () {
  "use strict";
  var island = document.getElementById("findmy-data");
  if (!island) { return; }
  var data = JSON.parse(island.textContent);
  var status = document.getElementById("live-status");
  var skewMillis = Date.now() - Date.parse(data.now);
  var state = { map: null, markers: {}, circles: {}, track: null, trackPoints: [], updates: 0, lost: false };
  window.findmyPanel = state;

  function say(text, lost) {
    if (!status) { return; }
    status.textContent = text;
    status.className = lost ? "lost" : "";
  }

  // One formatter for the page: toLocaleString with options builds a new one per call, which cost
  // about 0.3 ms per track point, most of a 30-day history's drawing time (docs/benchmarks.md).
  var localFormat = new Intl.DateTimeFormat([], { dateStyle: "medium", timeStyle: "short" });
  function localTime(iso) {
    return localFormat.format(new Date(iso));
  }

  function duration(seconds) {
    if (seconds < 90) { return seconds + " s"; }
    if (seconds < 5400) { return Math.round(seconds / 60) + " min"; }
    if (seconds < 129600) { return Math.round(seconds / 3600) + " h"; }
    return Math.round(seconds / 86400) + " days";
  }

  function relative(iso) {
    var seconds = Math.round((Date.now() - skewMillis - Date.parse(iso)) / 1000);
    if (seconds < -60) { return "in the future: " + duration(-seconds) + " ahead"; }
    if (seconds < 60) { return "just now"; }
    return duration(seconds) + " ago";
  }

  function refreshTimes() {
    document.querySelectorAll("time.local").forEach(function (element) {
      element.textContent = localTime(element.getAttribute("datetime"));
    });
    document.querySelectorAll(".ago[data-at]").forEach(function (element) {
      element.textContent = relative(element.getAttribute("data-at"));
    });
  }

  function localRanges() {
    var midnight = new Date();
    midnight.setHours(0, 0, 0, 0);
    var day = 86400000;
    var ranges = {
      today: [midnight.getTime(), midnight.getTime() + day],
      yesterday: [midnight.getTime() - day, midnight.getTime()]
    };
    document.querySelectorAll("a[data-range]").forEach(function (link) {
      var range = ranges[link.getAttribute("data-range")];
      if (!range) { return; }
      link.href = "/find-my?selected=" + encodeURIComponent(link.getAttribute("data-device")) +
        "&from=" + new Date(range[0]).toISOString() + "&to=" + new Date(range[1]).toISOString();
    });
  }

  // null: the app sent no accuracy. Never drawn or worded as precise.
  function accuracyText(meters) {
    if (meters === null || meters === undefined || !(meters > 0)) { return "accuracy unknown"; }
    return "± " + (meters >= 1000 ? (Math.floor(meters / 100) / 10) + " km" : Math.round(meters) + " m");
  }

  function known(meters) { return meters !== null && meters !== undefined && meters > 0; }

  function place(device) {
    var fix = device.latest;
    if (!fix) { return; }
    var at = [fix.latitude, fix.longitude];
    var marker = state.markers[device.id];
    // Unknown accuracy: no circle, a faded marker titled so; a pin alone would look precise.
    var title = known(fix.accuracy_m) ? device.name : device.name + " (accuracy unknown)";
    if (marker) {
      marker.setLatLng(at);
    } else {
      marker = L.marker(at, { title: title, alt: title, keyboard: true }).addTo(state.map);
      marker.on("click", function () { window.location.href = "/find-my?selected=" + device.id; });
      state.markers[device.id] = marker;
    }
    marker.setOpacity(known(fix.accuracy_m) ? 1 : 0.55);
    if (marker.getElement && marker.getElement()) { marker.getElement().title = title; }
    var circle = state.circles[device.id];
    if (!known(fix.accuracy_m)) {
      if (circle) { state.map.removeLayer(circle); delete state.circles[device.id]; }
    } else if (circle) {
      circle.setLatLng(at).setRadius(fix.accuracy_m);
    } else {
      // Always the circle when known: a 3 km fix must look like a 3 km fix.
      state.circles[device.id] = L.circle(at, {
        radius: fix.accuracy_m, weight: 1, fillOpacity: 0.15, interactive: false
      }).addTo(state.map);
    }
  }

  function drawMap() {
    var element = document.getElementById("map");
    if (!element) { return; }
    if (!window.L) {
      element.textContent = "The map is unavailable (Leaflet is not installed on the server); the list still works.";
      return;
    }
    state.map = L.map(element, { zoomControl: true, keyboard: true });
    var attribution = document.createElement("span");
    attribution.textContent = data.tile_attribution;
    L.tileLayer(data.tile_url, { attribution: attribution.innerHTML, maxZoom: 19 }).addTo(state.map);
    data.devices.forEach(place);
    var bounds = null;
    if (data.track && data.track.length) {
      var line = data.track.map(function (fix) { return [fix.latitude, fix.longitude]; });
      state.track = L.polyline(line, { weight: 3 }).addTo(state.map);
      // Thousands of points as SVG elements are what makes a month slow to draw; one canvas
      // holds them all. Tooltips and focus from the timeline work the same.
      var pointRenderer = L.canvas({ padding: 0.5 });
      data.track.forEach(function (fix) {
        var point = L.circleMarker([fix.latitude, fix.longitude], { radius: 4, weight: 1, renderer: pointRenderer })
          .bindTooltip(localTime(fix.recorded_at) + " · " + accuracyText(fix.accuracy_m))
          .addTo(state.map);
        state.trackPoints.push(point);
      });
      bounds = state.track.getBounds();
      document.querySelectorAll("#timeline li[data-index]").forEach(function (item) {
        var point = state.trackPoints[Number(item.getAttribute("data-index"))];
        if (!point) { return; }
        var show = function () { point.openTooltip(); };
        var hide = function () { point.closeTooltip(); };
        item.addEventListener("focus", show);
        item.addEventListener("mouseenter", show);
        item.addEventListener("blur", hide);
        item.addEventListener("mouseleave", hide);
      });
    } else {
      // A circle's own getBounds needs a map view, which is what is being decided here.
      data.devices.forEach(function (device) {
        if (!device.latest || (data.selected !== null && device.id !== data.selected)) { return; }
        var circle = L.latLng(device.latest.latitude, device.latest.longitude).toBounds(2 * (known(device.latest.accuracy_m) ? device.latest.accuracy_m : 100));
        bounds = bounds ? bounds.extend(circle) : circle;
      });
    }
    if (bounds) {
      state.map.fitBounds(bounds, { maxZoom: 17, padding: [20, 20] });
    } else {
      state.map.setView([20, 0], 2);
    }
    // For ops/bench/panel_browser.py: the moment the map's layers (the track included) are
    // in the DOM, on the page's performance.now() clock; the next paint shows them.
    document.documentElement.dataset.mapDrawnAt = String(performance.now());
  }

  function update(devices) {
    devices.forEach(function (device) {
      if (!device.latest) { return; }
      if (state.map) { place(device); }
      var row = document.querySelector('#device-list li[data-device-id="' + device.id + '"] .ago');
      if (row) { row.setAttribute("data-at", device.latest.recorded_at); }
      if (device.id === data.selected) {
        var taken = document.getElementById("fix-taken");
        if (taken) {
          taken.querySelector("time").setAttribute("datetime", device.latest.recorded_at);
          var ago = taken.querySelector(".ago");
          if (ago) { ago.setAttribute("data-at", device.latest.recorded_at); }
        }
        var accuracy = document.getElementById("accuracy");
        if (accuracy) { accuracy.textContent = accuracyText(device.latest.accuracy_m); }
        if (state.map && !state.track) { state.map.panTo([device.latest.latitude, device.latest.longitude]); }
      }
    });
    refreshTimes();
  }

  function poll() {
    fetch("/api/find-my/devices", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) {
          say("Your session has ended. Reload the page to log in again.", true);
          return null;
        }
        if (!response.ok) { throw new Error("status " + response.status); }
        return response.json();
      })
      .then(function (body) {
        if (!body) { return; }
        update(body.devices);
        state.updates += 1;
        state.lost = false;
        say("Live: updated " + new Date().toLocaleTimeString(), false);
        schedule();
      })
      .catch(function () {
        if (!state.lost) { state.lostSince = new Date(); }
        state.lost = true;
        say("Connection to the server lost since " + state.lostSince.toLocaleTimeString() +
          "; retrying. Positions shown may be out of date.", true);
        schedule();
      });
  }

  function schedule() { window.setTimeout(poll, Math.max(1, data.poll_seconds) * 1000); }

  refreshTimes();
  localRanges();
  drawMap();
  say("Live: waiting for the first update", false);
  schedule();
})();