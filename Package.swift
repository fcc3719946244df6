// swift-tools-version: 6.2
// findmy: a self-hosted "find my device" server. See ../shared/DESIGN.md and docs/.
import PackageDescription

/// libxml2's headers include each other as <libxml/...> from /usr/include/libxml2, a directory
/// the compiler does not search by itself. CXML2 is a C target (it loads libxml2 rather than link
/// it), so nothing gives that directory from pkg-config; and every Swift module that imports
/// Import, directly or not, reads CXML2's shim.h, so every one is told.
let libxml2Headers: SwiftSetting = .unsafeFlags(["-Xcc", "-I/usr/include/libxml2"])

/// Every Swift target builds in Swift 6 language mode with strict concurrency and no warnings.
let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .treatAllWarnings(as: .error),
    libxml2Headers,
]

let package = Package(
    name: "findmy",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "findmy", targets: ["findmy"]),
        .executable(name: "findmy-bench", targets: ["findmy-bench"]),
        .executable(name: "json-bench", targets: ["json-bench"]),
        .executable(name: "findmy-agent", targets: ["findmy-agent"]),
        .library(name: "FindMyClient", targets: ["FindMyClient"]),
    ],
    targets: [
        // C libraries, each touched by exactly one Swift module.
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CQRencode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        // libcurl built with nghttp2 (HTTP/2) and OpenSSL: every outgoing request, in HTTPClient only.
        // Not linked: CCurl's loader opens libcurl.so.4 with the first request (include/shim.h);
        // its headers come from libcurl4-openssl-dev.
        .target(name: "CCurl"),
        // The NATS C client (cnats 3.4): the JetStream event log, in NATSLog only.
        .systemLibrary(name: "CNATS", pkgConfig: "libnats", providers: [.apt(["libnats-dev"])]),
        // libxml2's SAX2 push parser: GPX and KML, in Import only. Not linked: CXML2's loader opens
        // libxml2.so.2 with the first XML import (include/shim.h); its headers come from libxml2-dev,
        // under /usr/include/libxml2 (`libxml2Headers`).
        .target(name: "CXML2", cSettings: [.unsafeFlags(["-I/usr/include/libxml2"])]),
        // libarchive: the entries of a .zip (KMZ, Google Takeout) as streams, in Import only. Not
        // linked: CArchive's loader opens libarchive.so.13 with the first archive import
        // (include/shim.h); its headers come from libarchive-dev.
        .target(name: "CArchive"),

        // Locks with condition variables, POSIX threads, services, and the one process spawner, shared
        // by the modules that block.
        .target(name: "Threads", swiftSettings: strict),

        // The event log: event types, the binary codec, segments, framing, recovery, reading.
        .target(name: "Events", dependencies: ["CLZ4", "Threads"], swiftSettings: strict),

        // The event log on a NATS JetStream cluster (docs/scale.md): Events' `EventLog`
        // protocols over one stream of P partitions. The one module that calls libnats.
        .target(name: "NATSLog", dependencies: ["CNATS", "Events", "Threads"], swiftSettings: strict),

        // Realistic synthetic tracks for benchmarks and tests.
        .target(name: "Workload", dependencies: ["Events"], swiftSettings: strict),

        // The HTTP server: requests, responses, routing, limits. The one module that calls libmicrohttpd.
        .target(name: "HTTP", dependencies: ["CMicroHTTPD", "Threads"], swiftSettings: strict),

        // The outgoing HTTP clients, both over libcurl (the one module that calls it): `HTTP2Client`
        // (push providers, headscale, webhooks) and `HTTPConnection`, a blocking HTTP/1.1 client for
        // tests, load and admin commands; one easy-handle setup (`CurlEasy`) with `AddressPolicy`
        // checked at connect time; the check of a URL a user gives the server to send to
        // (`OutgoingURL`) and the form of an ntfy message (`NtfyMessage`, its headers through Crypto's
        // Base64).
        .target(name: "HTTPClient", dependencies: ["CCurl", "Crypto", "Threads"], swiftSettings: strict),

        // A subscribing MQTT 3.1.1 client over POSIX sockets that sends a QoS 1 PUBACK only when the
        // application says the message is safe (libmosquitto and Paho C acknowledge on receipt; see
        // Sources/MQTT/Packet.swift and docs/clients.md).
        .target(name: "MQTT", dependencies: ["Threads"], swiftSettings: strict),

        // What a history means to a person: stays and the moves between them, and a track thinned for
        // drawing. Pure functions over fixes: no I/O, no other module.
        .target(name: "Tracks", swiftSettings: strict),

        // Strict JSON parsing and writing, and RFC 3339 timestamps. No Foundation.
        .target(name: "JSON", swiftSettings: strict),

        // The one module that touches libcrypto (SHA-256, secure random bytes, tokens) and libsodium
        // (Argon2id password hashes).
        .target(name: "Crypto", dependencies: ["CCrypto", "CSodium"], swiftSettings: strict),

        // The client side of TLS (TLSClientStream: OwnTracks' mqtts:// broker, the agent's https://
        // server), the one module that touches libssl, through CTLS: wrappers over libssl loaded
        // with dlopen on the first connection, so that a process that never dials TLS never maps
        // libssl and libcrypto (the agent on plain HTTP: docs/benchmarks.md, "The agent").
        .target(name: "CTLS", linkerSettings: [.linkedLibrary("dl")]),
        .target(name: "TLS", dependencies: ["CTLS"], swiftSettings: strict),

        // The pure core (docs/architecture.md): the registry of users, devices, tokens and shares
        // folded from the log, the command, geofence and presence books, registry snapshots, and
        // `RegistryStore`: the registry's locks and the one append path, written against
        // `RegistryLog`, whose two implementations are this machine's log and a shared one
        // (`SharedRegistry`). Events and locks only: no HTTP, JSON or hashing.
        .target(name: "Core", dependencies: ["Events", "Threads"], swiftSettings: strict),

        // Who may do what: sessions, passwords (Argon2id through Crypto) and roles; name rules; the
        // route permission table, the gate and `GuardedRouter`; `APIError` (with the 503s of Core's
        // `AppendFailure`), the status-source hook and the structured log; the login and logout
        // routes for programs (a form post goes to WebPanel's LoginForms), the token, share and user
        // routes, and their limits (IdentityLimits), over the `RegistryStore` it holds
        // (`IdentityService.store`). Every module that authenticates a caller imports this, never
        // `Ingest`.
        .target(
            name: "Identity",
            dependencies: ["Core", "Events", "HTTP", "JSON", "Crypto", "Threads"],
            swiftSettings: strict),

        // Enrolment, push tokens, pause, a device's retention and erasure, and the report endpoint:
        // validation, decoding and the HTTP handlers, over Core's registry store (Identity's `store`).
        // See docs/api.md.
        .target(
            name: "Ingest",
            dependencies: ["Core", "Identity", "Events", "HTTP", "HTTPClient", "JSON", "Crypto", "Threads"],
            swiftSettings: strict),
        // The apps people already run (OwnTracks, Overland, the OsmAnd protocol): each wire format
        // decoded into the report path's one entry point, IngestService.submit. docs/clients.md.
        // Also OwnTracks over MQTT (the subscriber service with its settings, and the command channel,
        // Commands' seam, publishing through MQTT) and the Friends view's reads of the projection.
        .target(
            name: "Clients",
            dependencies: [
                "Core", "CLI", "Ingest", "Identity", "Events", "HTTP", "JSON", "Crypto", "TLS", "Threads",
                "MQTT", "Commands", "Postgres", "ProjectionSchema",
            ],
            swiftSettings: strict),

        // Commands to devices (locate, sound, lost, found; docs/commands.md): the API, the lifecycle
        // events, the per-device rate limits and expiry, the dispatcher (CommandService) and the
        // channel seam the push providers and OwnTracks MQTT implement, their order, and the command
        // settings of `findmy serve`; GET reads the projection's commands table.
        .target(
            name: "Commands",
            dependencies: [
                "Core", "Identity", "Events", "HTTP", "JSON", "Threads", "Postgres", "ProjectionSchema",
                "Crypto",
            ],
            swiftSettings: strict),

        // The push providers as command channels: APNs (token auth), FCM HTTP v1 and UnifiedPush /
        // Web Push (RFC 8291 encryption, RFC 8292 VAPID), each over one long-lived HTTP/2 connection
        // per endpoint through HTTPClient's HTTP2Client; keys and signatures through Crypto; push
        // tokens from Core's registry; the providers' settings and their service. docs/commands.md.
        .target(
            name: "Push",
            dependencies: ["Core", "CLI", "Commands", "Crypto", "JSON", "HTTPClient", "Identity", "Threads"],
            swiftSettings: strict),

        // Import of location history from other trackers' files (Google Timeline, GPX, KML, GeoJSON,
        // CSV, OwnTracks Recorder): one streaming reader per format, in bounded memory.
        // docs/import-export.md.
        // GPX and KML through libxml2's streaming reader (CXML2), KMZ and .zip archives through
        // libarchive (CArchive): the one module that calls either.
        .target(
            name: "Import", dependencies: ["CArchive", "CXML2", "Crypto", "Events", "JSON"],
            swiftSettings: strict),
        // The import run (docs/import-export.md, "How an import is stored"): a file's two passes
        // (its SHA-256, then Import's reader cut into chunks) with each chunk through the report
        // path (Ingest's submit), the book of imports by id with their status, and their routes on
        // the admin socket and the network API. One code path for the command line, the API and
        // the panel.
        .target(
            name: "Importer",
            dependencies: ["Core", "Events", "HTTP", "Identity", "Import", "Ingest", "JSON", "Threads"],
            swiftSettings: strict),
        // Export of a device's fixes as GPX, GeoJSON and CSV: streaming writers into a byte sink, in
        // constant memory. Apart from Import so that what serves an export (the read API, the CLI's
        // export from the log) needs neither libxml2 nor libarchive. docs/import-export.md.
        .target(name: "Export", dependencies: ["Events", "JSON"], swiftSettings: strict),

        // Prints JSON parsing throughput against Foundation's JSONSerialization, and the streaming
        // tokenizer's and the Records.json reader's (`json-bench records`). Build with -c release.
        // `json-bench export`: the export writers' fixes/s.
        .executableTarget(
            name: "json-bench", dependencies: ["Events", "Export", "JSON", "Import"], swiftSettings: strict),
        // PostgreSQL: connections, parameters, results, errors, COPY, and the embedded cluster. Its
        // timestamps count days with JSON's CivilCalendar, the one calendar; bytea's hex is Crypto's Hex.
        // The one module that calls libpq.
        .target(name: "Postgres", dependencies: ["CPQ", "Threads", "JSON", "Crypto"], swiftSettings: strict),

        // The projection's names in one place: schemas, tables, the fix columns and their types.
        // The projector writes by it, the read API, the panel and the compactor query by it.
        .target(name: "ProjectionSchema", swiftSettings: strict),

        // Folds the log into PostgreSQL exactly once: schema, the fold, checkpoints, rebuilds.
        .target(
            name: "Projector", dependencies: ["Events", "Postgres", "JSON", "ProjectionSchema", "Threads"],
            swiftSettings: strict),

        // Geofences, one module: the projection (a second projector over the same log, through the
        // Projector's loop, folding fixes and fence definitions into transitions), and the alerts
        // that announce them (webhook, ntfy) from that table, with their own cursor and delivery log,
        // sent through HTTPClient's HTTP2Client; their settings and start for `findmy serve`.
        .target(
            name: "Geofences",
            dependencies: [
                "Core", "CLI", "Crypto", "Events", "HTTP", "HTTPClient", "Identity", "JSON", "Postgres",
                "ProjectionSchema",
                "Projector", "Threads",
            ],
            swiftSettings: strict),

        // The JSON read API over the projection: devices, latest fixes, history, arrivals, device cards.
        // Routes, SQL statements, row encoding and paging each in their own file. Callers and what
        // they may see come from Identity's gate.
        .target(
            name: "ReadAPI",
            dependencies: [
                "Core", "Identity", "Geofences", "Postgres", "ProjectionSchema", "HTTP", "JSON", "Events",
                "Crypto", "Threads", "Export", "Tracks",
            ],
            swiftSettings: strict),

        // A QR code's matrix of modules, through libqrencode: the one module that calls it.
        .target(name: "QRCode", dependencies: ["CQRencode"], swiftSettings: strict),

        // The web panel: every server-rendered page and form (the login form too, and "Add a device"
        // with its setup QR codes drawn from QRCode), the map script, Leaflet served from libjs-leaflet.
        // The script and style sheet are plain files compiled into the binary (`PackageResources`),
        // so the executable needs no resource bundle beside it. Identity for callers; Ingest only
        // for the retention and erasure forms and the enrolment of "Add a device".
        .target(
            name: "WebPanel",
            dependencies: [
                "Core", "Identity", "Ingest", "Postgres", "ProjectionSchema", "HTTP", "JSON", "Events",
                "Crypto", "Geofences", "Presence", "QRCode", "Tracks",
            ],
            resources: [
                .embedInCode("Resources/panel.js"), .embedInCode("Resources/panel-map.js"),
                .embedInCode("Resources/import.js"), .embedInCode("Resources/panel.css"),
            ],
            swiftSettings: strict),

        // Presence from the tailnet (docs/presence.md): the headscale poller, the rule of
        // what is a change, linking devices to nodes, its settings and start for `findmy serve`.
        // HTTPS through HTTPClient's HTTP2Client.
        .target(
            name: "Presence",
            dependencies: [
                "Core", "CLI", "Identity", "Events", "HTTP", "HTTPClient", "JSON", "Crypto", "Threads",
            ],
            swiftSettings: strict),

        // The retention job: which fixes are live, the log rewrite and the database deletes, with
        // its settings, admin routes, status and JSON.
        .target(
            name: "Compactor",
            dependencies: [
                "Events", "HTTP", "Identity", "JSON", "Postgres", "ProjectionSchema", "Projector", "Threads",
            ],
            swiftSettings: strict),

        // Retention by deletion on a JetStream log (docs/scale.md): the compactor's policy applied
        // to messages, which are erased (and what lives of them published again), not rewritten.
        .target(
            name: "JetStreamRetention",
            dependencies: ["Compactor", "Events", "NATSLog", "Postgres", "Threads"],
            swiftSettings: strict),

        // What both executables share: commands, their options and usage errors, dispatch, and
        // the JSON and text form of log records (`findmy log dump`, the report body a bench weighs).
        .target(name: "CLI", dependencies: ["Events", "JSON"], swiftSettings: strict),

        // The work of the offline commands on a data directory, once their arguments are parsed:
        // `findmy log` (inspection, repair, export and import into JetStream), `backup` and `restore`,
        // `purge` and its refusals, `user` and `retention` (through the admin socket or on the log
        // opened here, `AdminCall`), `compact` run and followed, `replay`, `import` with its
        // progress and summary.
        .target(
            name: "Maintenance",
            dependencies: [
                "CLI", "Compactor", "Core", "Crypto", "Events", "Export", "Geofences", "HTTP", "HTTPClient",
                "Identity", "Import", "Importer", "Ingest",
                "JSON", "NATSLog", "Postgres", "Projector", "Threads",
            ],
            swiftSettings: strict),

        // The command-line entry point: each command's arguments and help, and the composition of
        // the features into `findmy serve`, `project` and `projector` (commands only; the work of
        // the offline commands is Maintenance, the benchmark and load drivers are findmy-bench).
        .executableTarget(
            name: "findmy",
            dependencies: [
                "Core", "CLI", "Events", "Export", "JSON", "Identity", "Ingest", "Clients", "HTTP",
                "HTTPClient",
                "Crypto",
                "Postgres",
                "Projector", "Geofences",
                "ReadAPI", "Compactor", "WebPanel", "Threads", "ProjectionSchema", "Commands", "Push",
                "Presence", "NATSLog", "JetStreamRetention", "Maintenance", "Importer",
            ],
            swiftSettings: strict),

        // The device side (docs/client-library.md): enrolment, the durable queue of fixes, the pause
        // switch, push tokens and commands from report answers and the command stream, with the
        // platform behind protocols. No Foundation (its JSON through the package's JSON module, the
        // clock and files through POSIX), so that the agent stays small and an app can embed it.
        .target(name: "FindMyClient", dependencies: ["JSON"], swiftSettings: strict),

        // FindMyClient's ClientTransport over POSIX sockets, HTTP/1.1, TLS through TLS's
        // TLSClientStream (libssl, loaded only for https://): the agent's, and the tests'. Not libcurl, whose protocols'
        // libraries would cost the agent megabytes resident.
        .target(
            name: "FindMyClientHTTP", dependencies: ["FindMyClient", "TLS", "Threads"],
            swiftSettings: strict),

        // The agent for Linux devices (docs/agent.md): FindMyClient over FindMyClientHTTP, gpsd
        // or a fixed position, the battery from sysfs, sound and lost through local programs.
        .executableTarget(
            name: "findmy-agent", dependencies: ["FindMyClient", "FindMyClientHTTP", "JSON", "Threads"],
            swiftSettings: strict),

        // The benchmark and load drivers (docs/benchmarks.md, the crash tests): they start the real
        // findmy found beside them in the build's bin path.
        .executableTarget(
            name: "findmy-bench",
            dependencies: [
                "Core", "CLI", "Events", "Workload", "JSON", "HTTPClient", "Threads", "Postgres", "Projector",
                "ReadAPI", "Identity", "Ingest", "Compactor", "Crypto", "Commands", "Push", "Geofences",
                "NATSLog",
                "NATSSupport", "Export",
            ],
            swiftSettings: strict),

        // The one poll-until of the tests: deadline-based, a failure that says what was awaited.
        .target(name: "TestSupport", path: "Tests/TestSupport", swiftSettings: strict),
        // Package.swift's dependencies against the imports of every target's files.
        .testTarget(name: "TracksTests", dependencies: ["Tracks"], swiftSettings: strict),
        .testTarget(name: "PackageTests", swiftSettings: strict),
        .testTarget(
            name: "EventsTests", dependencies: ["Events", "Workload", "Threads", "TestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "HTTPTests", dependencies: ["HTTP", "HTTPClient", "Crypto", "TestSupport", "Threads"],
            swiftSettings: strict),
        .testTarget(
            name: "HTTPClientTests", dependencies: ["HTTPClient", "PushFakeSupport"], swiftSettings: strict),
        // The MQTT client against a real Debian mosquitto started on a free port.
        .testTarget(
            name: "MQTTTests", dependencies: ["MQTT", "Threads", "MosquittoSupport", "TestSupport"],
            swiftSettings: strict),
        // The one launcher of a real Debian mosquitto for the tests that need a broker: started so
        // that it never outlives the test process (Threads' spawnChild under setpriv --pdeathsig).
        .target(
            name: "MosquittoSupport", dependencies: ["Threads"], path: "Tests/MosquittoSupport",
            swiftSettings: strict),
        // The one launcher of a real Debian gpsd fed by gpsfake from an NMEA track (free port, dying
        // with the test process), and the track read and moved in time: for the agent's tests.
        .target(
            name: "GPSDSupport", dependencies: ["Threads"], path: "Tests/GPSDSupport", swiftSettings: strict),
        // The agent's Linux parts: gpsd through a real gpsd and gpsfake, the battery over a sysfs
        // tree in a temporary directory, the alarm through a sound command the test watches.
        .testTarget(
            name: "AgentTests",
            dependencies: ["findmy-agent", "FindMyClient", "GPSDSupport", "TestSupport", "Threads"],
            swiftSettings: strict),
        // The one launcher of the local fakes of the push providers (ops/tests/fake_push.py), dying
        // with the test process (setpriv --pdeathsig), for PushTests and the end-to-end tests.
        .target(
            name: "PushFakeSupport", dependencies: ["JSON", "Threads"], path: "Tests/PushFakeSupport",
            swiftSettings: strict),
        // The one launcher of a real three-node nats-server cluster (JetStream, routes on loopback,
        // free ports, a scratch directory), each node under setpriv --pdeathsig, and of what runs
        // beside it (a scratch PostgreSQL, `findmy projector`): for the JetStream tests and benches.
        .target(
            name: "NATSSupport", dependencies: ["Threads", "Postgres", "NATSLog"], path: "Tests/NATSSupport",
            swiftSettings: strict),
        .testTarget(
            name: "NATSLogTests", dependencies: ["NATSLog", "Events", "NATSSupport", "Threads"],
            swiftSettings: strict),
        // Projectors per partition (leases, take-over) and retention by deletion, on a real
        // three-node cluster and a private PostgreSQL; the take-over test runs two real
        // `findmy projector` processes (FINDMY_BIN).
        .testTarget(
            name: "PartitionedProjectorTests",
            dependencies: [
                "Projector", "Geofences", "JetStreamRetention", "Compactor", "NATSLog", "NATSSupport",
                "Postgres",
                "Events",
                "Threads", "TestSupport",
            ],
            swiftSettings: strict),
        .testTarget(name: "ThreadsTests", dependencies: ["Threads"], swiftSettings: strict),
        .testTarget(name: "WorkloadTests", dependencies: ["Workload", "Events"], swiftSettings: strict),
        .testTarget(name: "JSONTests", dependencies: ["JSON"], swiftSettings: strict),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto"], swiftSettings: strict),
        // The registry's fold, its books and their snapshot encoding, without a server.
        .testTarget(name: "CoreTests", dependencies: ["Core", "Events"], swiftSettings: strict),
        .testTarget(
            name: "IdentityTests",
            dependencies: [
                "Identity", "Core", "Ingest", "WebPanel", "Events", "JSON", "HTTP", "Crypto", "Geofences",
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "ClientsTests",
            dependencies: [
                "Clients", "Ingest", "Events", "JSON", "Threads", "Identity", "HTTP", "MQTT", "Commands",
                "MosquittoSupport", "TestSupport",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "IngestTests", dependencies: ["Ingest", "Identity", "Events", "JSON"],
            swiftSettings: strict),
        // Start real findmy processes (the server, the CLI) and check what a user would see.
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "Events", "JSON", "HTTPClient", "Postgres", "Crypto", "MosquittoSupport", "PushFakeSupport",
                "NATSSupport", "NATSLog", "TestSupport", "Import", "Threads", "GPSDSupport", "FindMyClient",
                "FindMyClientHTTP",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "ReadAPITests",
            dependencies: [
                "Core", "ReadAPI", "Identity", "Crypto", "Events", "Postgres", "HTTP", "JSON", "Threads",
                "Presence",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "WebPanelTests",
            dependencies: [
                "Core", "WebPanel", "Identity", "Ingest", "Events", "Postgres", "Crypto", "JSON", "QRCode",
                "HTTP", "FindMyClient", "Tracks",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "ImportTests", dependencies: ["Import", "Events", "Crypto"], swiftSettings: strict),
        // Each writer's output read back by Import's reader of that format: the round trip.
        .testTarget(
            name: "ExportTests", dependencies: ["Export", "Import", "Events", "JSON"], swiftSettings: strict),
        .testTarget(name: "QRCodeTests", dependencies: ["QRCode"], swiftSettings: strict),
        // The headscale shapes per version, the change rule, and the poller against
        // ops/tests/fake_headscale.py serving Fixtures/headscale.
        .testTarget(
            name: "PresenceTests",
            dependencies: ["Core", "Presence", "Identity", "Events", "JSON", "PushFakeSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "PostgresTests", dependencies: ["Postgres", "JSON", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "ProjectorTests",
            dependencies: [
                "Projector", "ProjectionSchema", "Postgres", "Events", "Workload", "Compactor", "Threads",
                "Geofences", "TestSupport", "ReadAPI", "WebPanel",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "GeofenceAlertsTests", dependencies: ["Geofences", "Clients", "Events", "JSON"],
            swiftSettings: strict),
        .testTarget(name: "GeofencesTests", dependencies: ["Geofences"], swiftSettings: strict),
        .testTarget(
            name: "CompactorTests", dependencies: ["Core", "Compactor", "Events", "Identity", "Threads"],
            swiftSettings: strict),
        // Each push channel against a local fake of its provider (ops/tests/fake_push.py: HTTP/2 over
        // TLS, checking JWTs, headers and payloads; the Web Push fake decrypts with Python's
        // cryptography).
        .testTarget(
            name: "PushTests",
            dependencies: [
                "Core", "Push", "Commands", "Crypto", "HTTPClient", "JSON", "Identity", "Events", "Threads",
                "PushFakeSupport",
            ],
            swiftSettings: strict),
        // FindMyClient's pure parts and its queue on disk (crash points as reopened directories).
        .testTarget(name: "FindMyClientTests", dependencies: ["FindMyClient"], swiftSettings: strict),
        // The socket transport against servers in this process and a TLS server (python3's ssl)
        // with a certificate of a CA made for the test: framing, kept connections, verification.
        .testTarget(
            name: "FindMyClientHTTPTests", dependencies: ["FindMyClient", "FindMyClientHTTP", "Threads"],
            swiftSettings: strict),
        // The dispatcher, rate limits and expiry on a manual clock, with a recording provider.
        .testTarget(
            name: "CommandsTests", dependencies: ["Core", "Commands", "Identity", "Events"],
            swiftSettings: strict),
    ]
)
