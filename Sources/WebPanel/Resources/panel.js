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

  // Each time in the viewer's time zone, once: a time's text changes only with its datetime
  // (update() sets both), while "… ago" ages at every poll. `folded`: a part left for later.
  function localTimes(scope, folded) {
    scope.querySelectorAll("time.local").forEach(function (element) {
      if (folded && folded.contains(element)) { return; }
      element.textContent = localTime(element.getAttribute("datetime"));
    });
  }

  function refreshAgo() {
    document.querySelectorAll(".ago[data-at]").forEach(function (element) {
      element.textContent = relative(element.getAttribute("data-at"));
    });
  }

  // The raw fixes' rows are folded away under the stays: their hundreds of times are put in the
  // viewer's time zone once the map is drawn, or when the reader unfolds them, whichever is first.
  function localFoldedTimes(folded) {
    if (!folded) { return; }
    var done = false;
    function localize() {
      if (done) { return; }
      done = true;
      localTimes(folded);
    }
    folded.addEventListener("toggle", localize);
    if (window.requestIdleCallback) { window.requestIdleCallback(localize, { timeout: 1000 }); } else {
      window.setTimeout(localize, 0);
    }
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

  // More devices than this are clustered (Debian's libjs-leaflet.markercluster, when installed)
  // and their accuracy circles share one canvas: a thousand SVG pins and circles are slow to draw.
  var clusterFrom = 50;
  var pins = window.findmyMap;
  function serverNow() { return Date.now() - skewMillis; }

  // A device's marker: a named pin (panel-map.js) with its accuracy circle. A new marker is
  // returned for the caller to add (in bulk, to the cluster group when there is one).
  function place(device) {
    var fix = device.latest;
    if (!fix) { return null; }
    var at = [fix.latitude, fix.longitude];
    var marker = state.markers[device.id], created = null;
    if (marker) {
      marker.setLatLng(at);
    } else {
      var element = pins.pin(device);
      marker = L.marker(at, {
        icon: L.divIcon({ className: "device-pin", html: element, iconSize: [0, 0], iconAnchor: [0, 0] }),
        keyboard: true, riseOnHover: true, zIndexOffset: device.id === data.selected ? 1000 : 0
      });
      marker.findmyPin = element;
      marker.on("click", function () {
        // While a geofence is drawn, a device's marker is a place to centre it on, not a link:
        // following it would lose the form.
        if (fences.editing !== null) {
          setCentre(marker.getLatLng().lat, marker.getLatLng().lng);
          return;
        }
        window.location.href = pins.link("/find-my?selected=" + device.id);
      });
      state.markers[device.id] = marker;
      created = marker;
    }
    // Unknown accuracy: no circle, a faded pin titled so; a pin alone would look precise.
    var title = pins.decorate(marker.findmyPin, device, serverNow(), device.id === data.selected);
    marker.options.title = title;
    marker.findmyPin.classList.toggle("unknown-accuracy", !known(fix.accuracy_m));
    if (marker.getElement && marker.getElement()) { marker.getElement().title = title; }
    var circle = state.circles[device.id];
    if (!known(fix.accuracy_m)) {
      if (circle) { state.map.removeLayer(circle); delete state.circles[device.id]; }
    } else if (circle) {
      circle.setLatLng(at).setRadius(fix.accuracy_m);
    } else {
      // Always the circle when known: a 3 km fix must look like a 3 km fix.
      var options = { radius: fix.accuracy_m, weight: 1, fillOpacity: 0.15, interactive: false };
      if (state.circleRenderer) { options.renderer = state.circleRenderer; }
      state.circles[device.id] = L.circle(at, options).addTo(state.map);
    }
    return created;
  }

  function placeAll(devices) {
    var created = devices.map(place).filter(function (marker) { return marker !== null; });
    if (state.cluster) { state.cluster.addLayers(created); } else {
      created.forEach(function (marker) { marker.addTo(state.map); });
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
    if (data.devices.length > clusterFrom) {
      state.circleRenderer = L.canvas({ padding: 0.5 });
      if (L.markerClusterGroup) {
        state.cluster = L.markerClusterGroup({
          maxClusterRadius: 50, disableClusteringAtZoom: 17, showCoverageOnHover: false
        }).addTo(state.map);
      }
    }
    placeAll(data.devices);
    var bounds = null, line = null;
    if (data.track && data.track.length) {
      line = data.track.map(function (fix) { return [fix.latitude, fix.longitude]; });
      bounds = L.latLngBounds(line);
    } else {
      // A circle's own getBounds needs a map view, which is what is being decided here.
      data.devices.forEach(function (device) {
        if (!device.latest || (data.selected !== null && device.id !== data.selected)) { return; }
        var circle = L.latLng(device.latest.latitude, device.latest.longitude).toBounds(2 * (known(device.latest.accuracy_m) ? device.latest.accuracy_m : 100));
        bounds = bounds ? bounds.extend(circle) : circle;
      });
    }
    // The view first, with only the devices' markers on the map; the track's layers then go onto
    // a map that has its final view, each projected and drawn once rather than again at every
    // change of view the fitting makes.
    fit(bounds);
    if (line) { drawTrack(line); }
    state.map.on("zoomend moveend", function () { pins.crowd(state.map, state.markers); });
    pins.crowd(state.map, state.markers);
    // For ops/bench/panel_browser.py: the moment the map's layers (the track included) are
    // in the DOM, on the page's performance.now() clock; the next paint shows them.
    document.documentElement.dataset.mapDrawnAt = String(performance.now());
  }

  // The range's track: the line, the stays and a dot per fix, the dots and the stays on one
  // canvas (thousands of SVG elements are what made a month slow to draw). A dot's tooltip is
  // made when it is first shown: a month has hundreds of dots, and few are ever pointed at.
  function drawTrack(line) {
    state.track = L.polyline(line, { weight: 3 }).addTo(state.map);
    var renderer = L.canvas({ padding: 0.5 });
    pins.drawStays(state, data.segments, localTime, renderer);
    var dots = L.featureGroup();
    data.track.forEach(function (fix, index) {
      var point = L.circleMarker(line[index], { radius: 4, weight: 1, renderer: renderer });
      point.findmyFix = fix;
      dots.addLayer(point);
      state.trackPoints.push(point);
    });
    dots.on("mouseover", function (event) { showPoint(event.layer); });
    dots.addTo(state.map);
    pins.scrubber(state, data.track, localTime);
    // The fixes' rows (folded away under the stays) show their dot on hover and focus.
    var timeline = document.getElementById("timeline");
    if (!timeline) { return; }
    function rowPoint(event) {
      var item = event.target.closest && event.target.closest("li[data-index]");
      return item ? state.trackPoints[Number(item.getAttribute("data-index"))] : null;
    }
    function rowShow(event) { var point = rowPoint(event); if (point) { showPoint(point); } }
    function rowHide(event) {
      var point = rowPoint(event);
      if (point && !(event.relatedTarget && event.relatedTarget.closest &&
          event.relatedTarget.closest("li[data-index]") === event.target.closest("li[data-index]"))) {
        point.closeTooltip();
      }
    }
    timeline.addEventListener("focusin", rowShow);
    timeline.addEventListener("mouseover", rowShow);
    timeline.addEventListener("focusout", rowHide);
    timeline.addEventListener("mouseout", rowHide);
  }

  function showPoint(point) {
    if (!point.getTooltip()) {
      point.bindTooltip(localTime(point.findmyFix.recorded_at) + " · " + accuracyText(point.findmyFix.accuracy_m));
    }
    point.openTooltip();
  }

  // Room for the pins around the fixes (a pin stands above its point, centred on it: half its width
  // to each side, its height above) and, on a phone, for the sheet over the map's lower part: no
  // pin is cut at an edge. The pins fitted are measured; past `clusterFrom` devices they are not
  // all drawn, and a typical pin's size stands for them.
  function fit(bounds) {
    if (!state.map) { return; }
    if (!bounds) { state.map.setView([20, 0], 2); return; }
    var side = 100, above = 60;
    if (data.devices.length <= clusterFrom) {
      // Leaflet puts markers in the page once the map has a view: a first one, then the pins' size.
      if (!state.map._loaded) { state.map.fitBounds(bounds, { maxZoom: 17, animate: false }); }
      side = 40;
      data.devices.forEach(function (device) {
        var marker = state.markers[device.id];
        if (!marker || (data.selected !== null && device.id !== data.selected)) { return; }
        side = Math.max(side, Math.min(200, marker.findmyPin.offsetWidth / 2 + 12));
        above = Math.max(above, marker.findmyPin.offsetHeight + 24);
      });
    }
    state.fitPadding = [side, above];
    state.map.fitBounds(bounds, {
      // Not animated: the first view is simply there, and an animation would end by moving the
      // map back to it after the reader (or a test) has moved it.
      maxZoom: 17, paddingTopLeft: [side, above], paddingBottomRight: [side, 20 + pins.sheetOverlap()],
      animate: false
    });
  }
  state.fit = fit;

  // Presence from the tailnet (docs/presence.md): the same words as the server's PresencePanel.
  function presenceContent(element, presence) {
    element.textContent = "";
    if (presence.online) {
      element.textContent = "online on the tailnet";
    } else if (presence.last_seen) {
      element.appendChild(document.createTextNode("offline, last seen "));
      var ago = document.createElement("span");
      ago.className = "ago";
      ago.setAttribute("data-at", presence.last_seen);
      element.appendChild(ago);
    } else {
      element.textContent = "offline, not seen by the tailnet since it was linked";
    }
  }

  function updatePresence(device) {
    if (!device.presence) { return; }
    var row = document.querySelector('#device-list li[data-device-id="' + device.id + '"] .meta');
    if (row) {
      var span = row.querySelector(".presence");
      if (!span) {
        span = document.createElement("span");
        span.className = "presence";
        row.appendChild(document.createTextNode(" · "));
        row.appendChild(span);
      }
      presenceContent(span, device.presence);
    }
    var detail = device.id === data.selected ? document.querySelector("#presence .presence") : null;
    if (detail) {
      presenceContent(detail, device.presence);
      var when = document.querySelector("#presence .when");
      if (when) {
        when.textContent = device.presence.online || !device.presence.last_seen ? "" :
          "(" + localTime(device.presence.last_seen) + ")";
      }
    }
  }

  function update(devices) {
    devices.forEach(function (device) {
      updatePresence(device);
      if (!device.latest) { return; }
      var listed = data.devices.filter(function (d) { return d.id === device.id; })[0];
      if (listed) {
        listed.latest = device.latest;
        listed.last_heard = device.last_seen_at || listed.last_heard;
      }
      if (state.map && listed) { placeAll([listed]); }
      var row = document.querySelector('#device-list li[data-device-id="' + device.id + '"] .ago');
      if (row) { row.setAttribute("data-at", device.latest.recorded_at); }
      if (device.id === data.selected) {
        var taken = document.getElementById("fix-taken");
        if (taken) {
          var time = taken.querySelector("time");
          time.setAttribute("datetime", device.latest.recorded_at);
          time.textContent = localTime(device.latest.recorded_at);
          var ago = taken.querySelector(".ago");
          if (ago) { ago.setAttribute("data-at", device.latest.recorded_at); }
        }
        var at = device.latest.latitude.toFixed(6) + "," + device.latest.longitude.toFixed(6);
        var geo = document.getElementById("directions-geo"), osm = document.getElementById("directions-osm");
        if (geo) { geo.href = "geo:" + at; }
        if (osm) { osm.href = "https://www.openstreetmap.org/directions?to=" + encodeURIComponent(at); }
        var accuracy = document.getElementById("accuracy");
        if (accuracy) { accuracy.textContent = accuracyText(device.latest.accuracy_m); }
        if (state.map && !state.track) { state.map.panTo([device.latest.latitude, device.latest.longitude]); }
      }
    });
    refreshAgo();
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


  // Commands (docs/commands.md): the buttons POST to the command API with the session's CSRF
  // token, then the progress is read back every two seconds and said in plain words.
  var clockFormat = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  function clock(iso) { return clockFormat.format(new Date(iso)); }
  var channelNames = {
    apns: "Apple", fcm: "Google", unifiedpush: "UnifiedPush", "owntracks-mqtt": "OwnTracks (MQTT)",
    "report-answer": "the app, with its report answer", "owntracks-http": "OwnTracks, with its answer"
  };
  var doneWords = { locate: "located", sound: "rang", lost: "marked lost", found: "marked found" };
  var finalStates = { answered: true, expired: true };

  function lastKnown() {
    var device = data.devices.filter(function (d) { return d.id === data.selected; })[0];
    if (!device || !device.latest) { return "there is no known position yet"; }
    return "the last known position is from " + clock(device.latest.recorded_at);
  }

  function progressText(command) {
    var parts = ["asked " + clock(command.requested_at)];
    command.deliveries.forEach(function (delivery) {
      var name = channelNames[delivery.channel] || delivery.channel;
      if (delivery.state === "sent") {
        parts.push("sent to " + name + " " + clock(delivery.at));
      } else {
        parts.push(name + " failed " + clock(delivery.at) + " (" + delivery.detail + ")" +
          (delivery.retry_at ? ", retrying " + clock(delivery.retry_at) : ""));
      }
    });
    if (command.state === "answered") {
      parts.push("answered " + clock(command.answer.answered_at) +
        (command.answer.fix ? " with a new position" : " (that position was removed since)"));
      return parts.join(" · ");
    }
    var waited = (Date.now() - skewMillis - Date.parse(command.requested_at)) / 1000;
    if (command.state === "expired" && command.end_reason === "found") {
      parts.push("ended: found");
      return parts.join(" · ");
    }
    if (command.state === "expired" || (command.kind === "locate" && waited > 30)) {
      return parts.join(" · ") + (command.state === "expired" ? " · no answer" : " · no answer yet") +
        " — the phone may be off, offline or out of battery; " + lastKnown();
    }
    return parts.join(" · ");
  }

  function logLine(command) {
    var line = (doneWords[command.kind] || command.kind) + " by " + command.requested_by + " at " +
      clock(command.requested_at);
    if (command.state === "answered") { line += " — answered " + clock(command.answer.answered_at); }
    else if (command.state === "expired") { line += command.end_reason === "found" ? " — ended: found" : " — no answer"; }
    else { line += " — " + command.state; }
    return line;
  }

  function commandsPath(section) { return "/api/find-my/devices/" + section.getAttribute("data-device") + "/commands"; }

  function loadLog(section) {
    fetch(commandsPath(section) + "?limit=20", { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        var list = document.getElementById("command-log");
        if (!list || !body) { return; }
        list.textContent = "";
        if (body.commands.length === 0) {
          var none = document.createElement("li");
          none.textContent = "Nothing yet.";
          list.appendChild(none);
        }
        body.commands.forEach(function (command) {
          var item = document.createElement("li");
          item.textContent = logLine(command);
          list.appendChild(item);
        });
      })
      .catch(function () {});
  }

  function follow(section, id, after, deadline) {
    var progress = document.getElementById("command-progress");
    fetch(commandsPath(section) + "/" + id + "?after_offset=" + after, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (command) {
        if (command) {
          progress.textContent = progressText(command);
          progress.setAttribute("data-state", command.state);
          if (finalStates[command.state]) { loadLog(section); return; }
        }
        if (Date.now() < deadline) { window.setTimeout(function () { follow(section, id, after, deadline); }, 2000); }
      })
      .catch(function () {
        if (Date.now() < deadline) { window.setTimeout(function () { follow(section, id, after, deadline); }, 2000); }
      });
  }

  function send(section, body) {
    var progress = document.getElementById("command-progress");
    progress.textContent = "asking…";
    fetch(commandsPath(section), {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": data.csrf || "" },
      body: JSON.stringify(body)
    })
      .then(function (response) {
        return response.json().then(function (json) { return { status: response.status, body: json, response: response }; });
      })
      .then(function (answer) {
        if (answer.status === 202) {
          progress.textContent = "asked " + clock(answer.body.requested_at);
          loadLog(section);
          follow(section, answer.body.command_id, answer.body.offset, Date.now() + 11 * 60000);
        } else if (answer.status === 429) {
          progress.textContent = "Asked too recently: try again in " +
            (answer.response.headers.get("Retry-After") || "a few") + " s.";
        } else {
          progress.textContent = (answer.body.error && answer.body.error.message) || ("failed: " + answer.status);
        }
      })
      .catch(function () { progress.textContent = "The server did not answer; try again."; });
  }

  function commands() {
    var section = document.getElementById("commands");
    if (!section) { return; }
    section.querySelectorAll("button[data-kind]").forEach(function (button) {
      if (button.type === "submit") { return; }
      button.addEventListener("click", function () { send(section, { kind: button.getAttribute("data-kind") }); });
    });
    var lost = document.getElementById("lost-form");
    if (lost) {
      lost.addEventListener("submit", function (event) {
        event.preventDefault();
        var body = { kind: "lost" };
        var message = lost.elements.message.value.trim();
        var phone = lost.elements.phone.value.trim();
        if (message) { body.message = message; }
        if (phone) { body.phone = phone; }
        send(section, body);
      });
    }
    loadLog(section);
  }

  // Geofences (docs/geofences.md, "In the panel"): the reader's fences are listed and drawn as
  // dashed circles; "New geofence" and "Edit" open a form whose centre is a click on the map (or
  // typed) and whose radius is typed or dragged by the handle on the circle's edge. Saving and
  // deleting go through the geofence API with the session's CSRF token; the API's own error
  // message is what the form shows, so the panel never invents a rule the server does not have.
  var radiusLimits = data.geofence_radius_m || { min: 10, max: 100000 };
  var fenceStyle = { color: "#8250df", weight: 2, dashArray: "6 4", fillOpacity: 0.08 };
  var fences = { list: [], layers: {}, editing: null, centre: null, draft: null };
  state.fences = fences.layers;
  state.geofences = fences;

  function byId(id) { return document.getElementById(id); }

  function selectedDevice() {
    return data.devices.filter(function (d) { return d.id === data.selected; })[0] || null;
  }

  function deviceName(id) {
    var device = data.devices.filter(function (d) { return d.id === id; })[0];
    return device ? device.name : null;
  }

  function radiusText(meters) {
    return meters >= 1000 ? (Math.round(meters / 100) / 10) + " km" : Math.round(meters) + " m";
  }

  // One call to the API: resolves with the JSON body of a 2xx answer, rejects with a sentence for
  // the reader (the API's error message when it sent one).
  function api(method, path, body) {
    var init = { method: method, credentials: "same-origin", cache: "no-store", headers: {} };
    if (method !== "GET") { init.headers["X-CSRF-Token"] = data.csrf || ""; }
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (response) {
      return response.text().then(function (text) {
        var json = null;
        try { json = text ? JSON.parse(text) : null; } catch (ignored) { json = null; }
        if (response.ok) { return json; }
        if (response.status === 401) {
          throw new Error("Your session has ended. Reload the page to log in again.");
        }
        throw new Error((json && json.error && json.error.message) ||
          ("The server answered " + response.status + "; try again."));
      });
    }, function () {
      throw new Error("The server did not answer; check the connection and try again.");
    });
  }

  // Leaflet writes a string tooltip in as HTML; a fence's name is its owner's own text, so it goes
  // in as a text node: "<img onerror=…>" is shown, never run.
  function textElement(text) {
    var element = document.createElement("span");
    element.textContent = text;
    return element;
  }

  function fenceStatus(text) {
    var status = byId("geofence-status");
    if (status) { status.textContent = text; }
  }

  function drawFences() {
    if (!state.map) { return; }
    Object.keys(fences.layers).forEach(function (id) {
      state.map.removeLayer(fences.layers[id]);
      delete fences.layers[id];
    });
    fences.list.forEach(function (fence) {
      if (fences.editing === fence.geofence_id) { return; }
      fences.layers[fence.geofence_id] = L.circle([fence.latitude, fence.longitude], {
        radius: fence.radius_m, color: fenceStyle.color, weight: fenceStyle.weight,
        dashArray: fenceStyle.dashArray, fillOpacity: fenceStyle.fillOpacity, interactive: false
      }).bindTooltip(textElement(fence.name)).addTo(state.map);
    });
  }

  function button(text, label, onClick) {
    var element = document.createElement("button");
    element.type = "button";
    element.textContent = text;
    if (label) { element.setAttribute("aria-label", label); }
    element.addEventListener("click", onClick);
    return element;
  }

  function listFences() {
    var list = byId("geofence-list");
    list.textContent = "";
    if (fences.list.length === 0) {
      var none = document.createElement("li");
      none.textContent = "No geofences yet. Choose New geofence, then click the map where its centre goes.";
      list.appendChild(none);
    }
    fences.list.forEach(function (fence) {
      var item = document.createElement("li");
      item.setAttribute("data-geofence-id", String(fence.geofence_id));
      var name = button(fence.name, "Show " + fence.name + " on the map", function () {
        if (!state.map) { return; }
        state.map.fitBounds(L.latLng(fence.latitude, fence.longitude).toBounds(2 * fence.radius_m),
          { padding: [20, 20] });
      });
      name.className = "fence-name";
      item.appendChild(name);
      var meta = document.createElement("span");
      meta.className = "meta";
      var names = fence.device_ids.map(function (id) { return deviceName(id) || "a device you no longer see"; });
      meta.textContent = radiusText(fence.radius_m) + " · " + names.join(", ");
      item.appendChild(meta);
      var actions = document.createElement("span");
      actions.className = "fence-actions";
      actions.appendChild(button("Edit", "Edit " + fence.name, function () { openForm(fence); }));
      actions.appendChild(button("Delete", "Delete " + fence.name, function () { confirmDelete(item, fence); }));
      item.appendChild(actions);
      list.appendChild(item);
    });
  }

  function loadFences() {
    return api("GET", "/api/find-my/geofences").then(function (body) {
      fences.list = body.geofences;
      listFences();
      drawFences();
      pins.places(fences.list, selectedDevice(), data.segments);
    }).catch(function (error) {
      var list = byId("geofence-list");
      list.textContent = "";
      var item = document.createElement("li");
      item.className = "error";
      item.textContent = "The geofences could not be loaded: " + error.message;
      list.appendChild(item);
    });
  }

  function confirmDelete(item, fence) {
    if (item.querySelector(".confirm")) { return; }
    var confirm = document.createElement("p");
    confirm.className = "confirm";
    confirm.setAttribute("role", "alert");
    confirm.textContent = "Delete “" + fence.name + "” and every transition found for it? This cannot be undone. ";
    var yes = button("Yes, delete", null, function () {
      yes.disabled = true;
      api("DELETE", "/api/find-my/geofences/" + fence.geofence_id).then(function (answer) {
        if (fences.editing === fence.geofence_id) { closeForm(); }
        fenceStatus("Deleted “" + fence.name + "”.");
        loadTransitions(false, answer && answer.offset);
        return loadFences();
      }).catch(function (error) {
        yes.disabled = false;
        confirm.textContent = error.message;
      });
    });
    yes.className = "danger";
    yes.id = "geofence-delete-confirm";
    confirm.appendChild(yes);
    confirm.appendChild(document.createTextNode(" "));
    confirm.appendChild(button("Keep it", null, function () { item.removeChild(confirm); }));
    item.appendChild(confirm);
    yes.focus();
  }

  // The point `meters` due east of `centre` on Leaflet's sphere, where the radius handle sits:
  // map.distance() of the two is then the radius again.
  function eastOf(centre, meters) {
    var radius = L.CRS.Earth.R, delta = meters / radius, toRad = Math.PI / 180;
    var lat = centre.lat * toRad;
    var lat2 = Math.asin(Math.sin(lat) * Math.cos(delta));
    var lng2 = centre.lng * toRad + Math.atan2(Math.sin(delta) * Math.cos(lat), Math.cos(delta) - Math.sin(lat) * Math.sin(lat2));
    return L.latLng(lat2 / toRad, lng2 / toRad);
  }

  function draftRadius() {
    var value = Number(byId("geofence-radius").value);
    return value > 0 ? value : radiusLimits.min;
  }

  function removeDraft() {
    if (!fences.draft) { return; }
    [fences.draft.circle, fences.draft.centre, fences.draft.handle].forEach(function (layer) { state.map.removeLayer(layer); });
    fences.draft = null;
    state.draft = null;
  }

  function drawDraft() {
    if (!state.map) { return; }
    if (!fences.centre) { removeDraft(); return; }
    var centre = L.latLng(fences.centre[0], fences.centre[1]);
    var radius = draftRadius();
    if (fences.draft) {
      fences.draft.circle.setLatLng(centre).setRadius(radius);
      fences.draft.centre.setLatLng(centre);
      fences.draft.handle.setLatLng(eastOf(centre, radius));
      return;
    }
    var circle = L.circle(centre, {
      radius: radius, color: fenceStyle.color, weight: 3, fillOpacity: 0.15, interactive: false
    }).addTo(state.map);
    var centreMarker = L.marker(centre, {
      draggable: true, title: "Centre of the geofence (drag to move)", alt: "Centre of the geofence",
      icon: L.divIcon({ className: "geofence-centre", iconSize: [14, 14] })
    }).addTo(state.map);
    var handle = L.marker(eastOf(centre, radius), {
      draggable: true, title: "Radius of the geofence (drag to resize)", alt: "Radius handle",
      icon: L.divIcon({ className: "geofence-handle", iconSize: [18, 18] })
    }).addTo(state.map);
    centreMarker.on("drag", function () {
      var at = centreMarker.getLatLng();
      setCentre(at.lat, at.lng);
    });
    handle.on("drag", function () {
      var meters = Math.round(state.map.distance(L.latLng(fences.centre[0], fences.centre[1]), handle.getLatLng()));
      meters = Math.min(radiusLimits.max, Math.max(radiusLimits.min, meters));
      byId("geofence-radius").value = String(meters);
      circle.setRadius(meters);
    });
    // Back onto the circle's edge, wherever the drag left it (north of it, or past a limit).
    handle.on("dragend", function () { afterDrag(); drawDraft(); });
    centreMarker.on("dragend", afterDrag);
    fences.draft = { circle: circle, centre: centreMarker, handle: handle };
    state.draft = fences.draft;
  }

  // The release that ends a drag is also a click, which Leaflet gives to the map when the pointer
  // left the marker (a quick drag outruns it): that click must not move the centre. The click
  // comes in the same turn of the event loop as the release.
  function afterDrag() {
    fences.dragEnded = true;
    window.setTimeout(function () { fences.dragEnded = false; }, 0);
  }

  function setCentre(latitude, longitude) {
    fences.centre = [latitude, longitude];
    byId("geofence-latitude").value = latitude.toFixed(6);
    byId("geofence-longitude").value = longitude.toFixed(6);
    byId("geofence-hint").textContent = "Centre set. Click the map again or drag the centre to move it.";
    drawDraft();
  }

  function typedCentre() {
    var latitude = byId("geofence-latitude").value, longitude = byId("geofence-longitude").value;
    fences.centre = latitude !== "" && longitude !== "" && isFinite(Number(latitude)) && isFinite(Number(longitude)) ?
      [Number(latitude), Number(longitude)] : null;
    drawDraft();
  }

  function formError(text) {
    var error = byId("geofence-error");
    error.textContent = text || "";
    error.hidden = !text;
  }

  function openForm(fence) {
    var form = byId("geofence-form");
    fences.editing = fence ? fence.geofence_id : "new";
    byId("geofence-form-heading").textContent = fence ? "Edit “" + fence.name + "”" : "New geofence";
    byId("geofence-name").value = fence ? fence.name : "";
    byId("geofence-radius").value = String(fence ? fence.radius_m : 150);
    byId("geofence-latitude").value = fence ? String(fence.latitude) : "";
    byId("geofence-longitude").value = fence ? String(fence.longitude) : "";
    byId("geofence-hint").textContent = fence ?
      "Click the map or drag the centre to move it; drag the handle on the edge to resize." :
      "Click the map where the centre goes, or type its latitude and longitude.";
    var named = fence ? fence.device_ids : (data.selected !== null ? [data.selected] : []);
    form.querySelectorAll("input[name=device]").forEach(function (box) {
      box.checked = named.indexOf(Number(box.value)) >= 0;
    });
    // A device no longer visible (a share ended) cannot be offered: saving drops it.
    var dropped = fence ? fence.device_ids.filter(function (id) { return deviceName(id) === null; }) : [];
    byId("geofence-dropped").hidden = dropped.length === 0;
    byId("geofence-dropped").textContent = dropped.length === 0 ? "" :
      dropped.length + " device(s) this geofence names are no longer yours to see; saving drops them.";
    formError("");
    form.hidden = false;
    fences.centre = fence ? [fence.latitude, fence.longitude] : null;
    if (state.map) { state.map.getContainer().classList.add("drawing"); }
    drawFences();
    drawDraft();
    byId("geofence-name").focus();
  }

  function closeForm() {
    byId("geofence-form").hidden = true;
    fences.editing = null;
    fences.centre = null;
    removeDraft();
    if (state.map) { state.map.getContainer().classList.remove("drawing"); }
    drawFences();
  }

  function saveFence(event) {
    event.preventDefault();
    if (!fences.centre) {
      formError("Click the map where the centre goes, or type its latitude and longitude.");
      return;
    }
    var form = byId("geofence-form");
    var number = function (id) { var text = byId(id).value.trim(); return text === "" ? null : Number(text); };
    var body = {
      name: byId("geofence-name").value.trim(), latitude: number("geofence-latitude"),
      longitude: number("geofence-longitude"), radius_m: number("geofence-radius"),
      device_ids: Array.prototype.filter.call(form.querySelectorAll("input[name=device]"), function (box) {
        return box.checked;
      }).map(function (box) { return Number(box.value); })
    };
    var editing = fences.editing;
    var save = byId("geofence-save");
    save.disabled = true;
    formError("");
    var request = editing === "new" ? api("POST", "/api/find-my/geofences", body) :
      api("PUT", "/api/find-my/geofences/" + editing, body);
    request.then(function (answer) {
      save.disabled = false;
      closeForm();
      fenceStatus("Saved “" + body.name + "”.");
      loadFences();
      // The fence's transitions over the retained history, once the projection has folded it.
      loadTransitions(false, answer && answer.offset);
    }).catch(function (error) {
      save.disabled = false;
      formError(error.message);
    });
  }

  function geofences() {
    var form = byId("geofence-form");
    if (!form) { return; }
    byId("new-geofence").addEventListener("click", function () { openForm(null); });
    byId("geofence-cancel").addEventListener("click", closeForm);
    form.addEventListener("submit", saveFence);
    byId("geofence-radius").addEventListener("input", drawDraft);
    byId("geofence-latitude").addEventListener("input", typedCentre);
    byId("geofence-longitude").addEventListener("input", typedCentre);
    if (state.map) {
      state.map.on("click", function (event) {
        if (fences.editing !== null && !fences.dragEnded) { setCentre(event.latlng.lat, event.latlng.lng); }
      });
    }
    loadFences();
  }

  // The selected device's comings and goings (GET /api/find-my/devices/{id}/transitions): the
  // server's decisions, and the device's own reports marked as its view. A transition learnt late
  // (a phone offline for the morning) says when it was known: "left Home at 08:10, known at 11:45".
  var hourFormat = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit" });
  function sameDay(a, b) { return a.toDateString() === b.toDateString(); }
  function when(iso, beside) {
    var at = new Date(iso);
    return sameDay(at, beside || new Date(Date.now() - skewMillis)) ? hourFormat.format(at) : localTime(iso);
  }

  function transitionText(transition) {
    var device = transition.source === "device";
    var place = device ? (transition.region || transition.geofence_name || "a region") :
      (transition.geofence_name || "a geofence");
    var line = (transition.event === "enter" ? "entered " : "left ") + place + " at " + when(transition.recorded_at);
    var lateMillis = Date.parse(transition.received_at) - Date.parse(transition.recorded_at);
    if (lateMillis >= (data.same_time_seconds || 60) * 1000) {
      line += ", known at " + when(transition.received_at, new Date(transition.recorded_at));
    }
    line += " · " + accuracyText(transition.fix_accuracy_m);
    return device ? "the device says: " + line : line;
  }

  var transitionsCursor = null;
  // `afterOffset`: a change's log offset, which the answer waits for (the read API's after_offset).
  function loadTransitions(more, afterOffset) {
    var section = byId("transitions");
    if (!section) { return; }
    var list = byId("transition-list"), moreButton = byId("transitions-more");
    var path = "/api/find-my/devices/" + section.getAttribute("data-device") + "/transitions?from=" +
      encodeURIComponent(section.getAttribute("data-from")) + "&to=" + encodeURIComponent(section.getAttribute("data-to"));
    if (more && transitionsCursor) { path += "&cursor=" + encodeURIComponent(transitionsCursor); }
    if (afterOffset !== undefined && afterOffset !== null) { path += "&after_offset=" + afterOffset; }
    api("GET", path).then(function (body) {
      if (!more) { list.textContent = ""; }
      if (!more && body.transitions.length === 0) {
        var none = document.createElement("li");
        none.textContent = "None in this range.";
        list.appendChild(none);
      }
      body.transitions.forEach(function (transition) {
        var item = document.createElement("li");
        item.className = transition.source === "device" ? "device-view" : "server-view";
        item.setAttribute("data-event", transition.event);
        item.textContent = transitionText(transition);
        list.appendChild(item);
      });
      transitionsCursor = body.next_cursor;
      moreButton.hidden = !transitionsCursor;
    }).catch(function (error) {
      list.textContent = "";
      var item = document.createElement("li");
      item.className = "error";
      item.textContent = "The transitions could not be loaded: " + error.message;
      list.appendChild(item);
    });
  }

  function transitions() {
    var moreButton = byId("transitions-more");
    if (!moreButton) { return; }
    moreButton.addEventListener("click", function () { loadTransitions(true); });
    loadTransitions(false);
  }

  // "Notify when found" (docs/found-notices.md): the card reads the device and its found-notice
  // delivery log every three seconds while the notice is armed, until the notice it fired is queued,
  // and while a delivery of it waits, and says what became of the newest notice. A notice that went
  // off turns the button back to arming it.
  var foundChannelNames = { ntfy: "ntfy", webhook: "the webhook" };
  var foundWaitMillis = 120000;

  function foundDeliveryText(delivery) {
    var name = foundChannelNames[delivery.channel] || delivery.channel;
    if (delivery.state === "delivered") { return name + ": delivered " + clock(delivery.finished_at); }
    var why = delivery.last_error || (delivery.last_status ? "answered " + delivery.last_status : "");
    if (delivery.state === "failed") { return name + ": failed after " + delivery.attempts + " tries (" + why + ")"; }
    if (delivery.attempts === 0) { return name + ": sending"; }
    return name + ": not delivered yet (" + why + "), next try " + clock(delivery.next_attempt_at);
  }

  function foundNotice() {
    var stateLine = byId("notify-state");
    var line = byId("notify-delivery");
    if (!stateLine || !line) { return; }
    var device = stateLine.getAttribute("data-device");
    var armed = stateLine.getAttribute("data-armed") === "true";
    var wentOffAt = null;
    function show(deliveries) {
      var newest = deliveries.length ? deliveries[0].idempotency_key : null;
      var current = deliveries.filter(function (d) { return d.idempotency_key === newest; });
      if (!current.length) { return current; }
      var states = current.map(function (d) { return d.state; });
      line.setAttribute("data-state", states.indexOf("pending") >= 0 ? "pending" :
        (states.indexOf("failed") >= 0 ? "failed" : "delivered"));
      line.textContent = "Last found notice, for its report of " + clock(current[0].recorded_at) + ": " +
        current.map(foundDeliveryText).join(" · ");
      return current;
    }
    function check() {
      var base = "/api/find-my/devices/" + encodeURIComponent(device);
      Promise.all([api("GET", base), api("GET", base + "/found-notices/deliveries")]).then(function (answers) {
        var notice = answers[0].notify_when_found || { armed: false };
        if (armed && !notice.armed) {
          wentOffAt = Date.now();
          stateLine.setAttribute("data-armed", "false");
          stateLine.textContent = "Found: it reported again, and notify when found went off.";
          byId("notify-form").querySelector("input[name=armed]").value = "true";
          byId("notify-when-found").textContent = "Notify when found";
        }
        armed = notice.armed;
        var current = show(answers[1].deliveries);
        var pending = current.some(function (d) { return d.state === "pending"; });
        // The notifier queues a notice a moment after the report that fired it.
        var queued = current.length && Date.parse(current[0].queued_at) >= wentOffAt - skewMillis - 60000;
        var waiting = wentOffAt !== null && !queued && Date.now() - wentOffAt < foundWaitMillis;
        if (armed || pending || waiting) { window.setTimeout(check, 3000); }
      }).catch(function () {
        if (armed) { window.setTimeout(check, 3000); }
      });
    }
    check();
  }

  var folded = document.getElementById("fixes");
  localTimes(document, folded);
  refreshAgo();
  localRanges();
  pins.sheet(function () {
    if (state.map) { state.map.invalidateSize(); }
  });
  drawMap();
  localFoldedTimes(folded);
  commands();
  geofences();
  transitions();
  foundNotice();
  say("Live: waiting for the first update", false);
  schedule();
})();