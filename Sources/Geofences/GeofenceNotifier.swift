import Core
import Events
import HTTPClient
import Identity
import JSON
import Postgres
import ProjectionSchema
import Synchronization
import Threads

/// Announces the geofence projection's transitions (docs/geofences.md, "Notifications"): a webhook
/// (JSON, signed) and an ntfy topic per fence, as its owner set them (event 39).
///
/// It follows `geofence_transitions` by id with a cursor of its own in PostgreSQL: each round reads
/// the rows after the cursor and, in the same transaction, writes their deliveries and moves the
/// cursor, so a crash neither skips nor doubles a transition. Only a transition recorded within
/// `Options.notifyWindowMicros` of now is announced: the projection also evaluates history (a fence
/// drawn today over last week's fixes, a late offline batch), and that must never flood anyone.
/// Deliveries are then sent, and a failure (no answer, or a status other than 2xx) is retried with
/// exponential backoff on the injected clock, the same idempotency key each time, until
/// `attemptsMax`. A crash after a send and before its row is updated sends it again: delivery is at
/// least once, and the key is what lets a receiver drop the second copy.
///
/// Who hears of a device: a fence's owner, while the registry's rule lets them see it
/// (`Registry.visibility`). It is asked when a transition is queued (at its fix's `received_at`,
/// which the log keeps, and now, so a replay decides the same) and again right before each send:
/// a delivery queued while a share held and due after it ended is deleted unsent. Both count as
/// `withheld`; so does a delivery whose fence was deleted.
///
/// When: the geofence projector rings `wake` after each commit, so a new transition is queued and
/// sent at once; `pollMicros` is only the fallback (and a retry's due time wakes it too). Sends do
/// not wait for each other: each is in flight on its own (bounded by the client's request timeout,
/// 30 s) and its answer is recorded in the round after it arrives, so a receiver that hangs holds
/// back only its own delivery, not the other fences' (nor new transitions).
public final class GeofenceNotifier: Service, StatusSource {
    public struct Options: Sendable {
        /// Transitions recorded longer ago than this are not announced (1 hour).
        public var notifyWindowMicros: Int64 = 3_600_000_000
        /// The first retry waits this long; each next one twice as long.
        public var retryBaseMicros: Int64 = 10_000_000
        public var retryDelayMicrosMax: Int64 = 3_600_000_000
        /// Sends per delivery, the first included; then the delivery is `failed`.
        public var attemptsMax = 8
        /// How often the transitions are looked at when nothing woke the notifier (the geofence
        /// projector rings at every commit): a fallback, for a projector in another process.
        public var pollMicros: Int64 = 30_000_000
        /// Transitions read per round, and deliveries in flight at once.
        public var rowsPerRoundMax = 500
        /// In a cluster (docs/scale.md, "Geofences in a cluster"): the advisory-lock class (key 0)
        /// whose holder alone runs rounds, so that of several ingest nodes given `--database-url`
        /// exactly one sends. 7407, `PartitionLeases.notifierClass` in the Projector module, which
        /// lists every lock class. nil on one machine: one server, one notifier.
        public var leaseClass: Int32?
        /// How often a notifier without the lease tries to take it.
        public var leaseCheckMicros: Int64 = 1_000_000
        public init() {}
    }

    public let name = "geofence-notifier"
    let client: PostgresClient
    let identity: IdentityService
    let http: HTTP2Client
    let signing: WebhookSigning
    let options: Options
    let clockMicros: @Sendable () -> Int64
    private let worker = StoppableThread()
    let counters = Mutex(Counters())
    private let tablesPrepared = Mutex(false)
    /// Rung by the geofence projector's commits (through `wake`), by each answer, and by a stop.
    private let bell = Doorbell()
    let wake: Doorbells?
    private let flight = Mutex(Flight())
    /// The cursors the last queueing wrote (`mayHaveNewRows`).
    let followed = Mutex(NotifierFollow())
    /// The end of the registry this process folded (an ingest node's follower), or nil when the
    /// registry is always ahead of the projection (one machine: both fold the same local log, the
    /// registry first). A transition is queued only once the registry holds its fix's record (the
    /// fence's settings and names as of then): queued before, it could be passed over for good.
    let registryEnd: (@Sendable () -> UInt64)?
    /// The session holding `Options.leaseClass`; touched by the worker thread only.
    private nonisolated(unsafe) var leaseSession: PostgresConnection?

    /// The deliveries sent and not yet recorded: their ids (never selected again meanwhile) and the
    /// answers that arrived, which the worker records (the client's thread does no database I/O).
    struct Flight {
        var ids: Set<Int64> = []
        var answered: [(Due, Result<IncomingResponse, TransportFailure>)] = []
    }

    struct Counters {
        var cursor: Int64 = 0
        /// Rounds run to their end (with or without an error).
        var rounds = 0
        var queued = 0
        var delivered = 0
        var failedAttempts = 0
        var givenUp = 0
        /// Transitions not queued and deliveries deleted unsent: their fence's owner may no longer
        /// see the device (a share ended, the device was removed) or the fence is gone.
        var withheld = 0
        var lastError: String?
        /// With `Options.leaseClass`: whether this process holds the lease (runs rounds).
        var holdsLease = false
    }

    public init(
        client: PostgresClient, identity: IdentityService, http: HTTP2Client, signing: WebhookSigning,
        options: Options = Options(), clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        wake: Doorbells? = nil, registryEnd: (@Sendable () -> UInt64)? = nil
    ) {
        self.wake = wake
        self.registryEnd = registryEnd
        self.client = client
        self.identity = identity
        self.http = http
        self.signing = signing
        self.options = options
        self.clockMicros = clockMicros
    }

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    /// PostgreSQL may be down when findmy starts (the projectors wait for it too): the tables are
    /// made by the first round that reaches it, not at start, which would refuse to start serving.
    public func start() throws {
        wake?.add(bell)
        worker.start { [self] stop in
            stop.addDoorbell(bell)
            defer { stop.removeDoorbell(bell) }
            defer {
                leaseSession?.close()
                leaseSession = nil
            }
            while !stop.isRequested {
                let waitMicros = holdsLease() ? round() : options.leaseCheckMicros
                if waitMicros > 0 { bell.wait(untilMonotonicMicros: monotonicMicros() + waitMicros) }
            }
        }
    }

    /// Whether this process may run a round: always without `Options.leaseClass`; else whether its
    /// lease session holds the lock (taken when free). A session that ended lost the lock with it,
    /// and another node's notifier takes it over. Deliveries the old holder sent and had not
    /// recorded yet are pending still, and are sent again by the new one: at least once, as after
    /// a restart, with the same idempotency key.
    func holdsLease() -> Bool {
        guard let leaseClass = options.leaseClass else { return true }
        let held: Bool
        do {
            if leaseSession.map({ !$0.isAlive }) ?? true {
                leaseSession?.close()
                leaseSession = try PostgresConnection(client.conninfo)
                try leaseSession!.executeScript("SET application_name = 'findmy geofence-notifier'")
            }
            let session = leaseSession!
            // Asked each round rather than remembered: a lock taken again would stack.
            let owned = try session.execute(
                """
                SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
                    AND pid = pg_backend_pid() AND classid = $1::integer AND objid = 0 AND objsubid = 2)
                """, [.int64(Int64(leaseClass))]
            ).bool(0, 0)
            if owned == true {
                held = true
            } else {
                held =
                    try session.execute(
                        "SELECT pg_try_advisory_lock($1::integer, 0)", [.int64(Int64(leaseClass))]
                    ).bool(0, 0) == true
            }
        } catch {
            leaseSession?.close()
            leaseSession = nil
            counters.withLock {
                $0.lastError = "\(error)"
                $0.holdsLease = false
            }
            return false
        }
        let taken = counters.withLock { counters -> Bool in
            defer { counters.holdsLease = held }
            return held && !counters.holdsLease
        }
        if taken { StructuredLog.info("geofence_notifier_lease_taken", [:]) }
        return held
    }

    public func stop(graceMicros: Int64) {
        wake?.remove(bell)
        worker.stop()
        http.close()
        client.close()
    }

    /// One round: record the answers that arrived, queue new transitions, send what is due. Returns
    /// how long to sleep before the next unless woken: 0 when there may be more to do at once, else
    /// until the next retry is due, at most `pollMicros`.
    @discardableResult
    public func round() -> Int64 {
        defer { counters.withLock { $0.rounds += 1 } }
        do {
            if !tablesPrepared.withLock({ $0 }) {
                try client.withConnection { try AlertTables.prepare($0) }
                tablesPrepared.withLock { $0 = true }
            }
            try recordAnswers()
            let queued = mayHaveNewRows() ? try enqueue() + enqueueFoundNotices() : 0
            let (sent, nextDueMicros) = try deliverDue()
            counters.withLock { $0.lastError = nil }
            if queued >= options.rowsPerRoundMax || sent >= options.rowsPerRoundMax { return 0 }
            guard let nextDueMicros else { return options.pollMicros }
            return min(max(nextDueMicros - clockMicros(), 0), options.pollMicros)
        } catch {
            counters.withLock { $0.lastError = "\(error)" }
            return options.pollMicros
        }
    }

    /// Records the answers that arrived since the last round; a failure to record leaves the
    /// rest for the next round (the delivery stays in flight until it is recorded).
    func recordAnswers() throws {
        let answered = flight.withLock { flight in
            defer { flight.answered.removeAll() }
            return flight.answered
        }
        for (index, (delivery, outcome)) in answered.enumerated() {
            do {
                try record(delivery, outcome, now: clockMicros())
            } catch {
                flight.withLock { $0.answered.insert(contentsOf: answered[index...], at: 0) }
                throw error
            }
            _ = flight.withLock { $0.ids.remove(delivery.id) }
        }
    }

    // MARK: queueing

    /// Reads the transitions after the cursor and writes their deliveries and the new cursor in one
    /// transaction. Returns the transitions read.
    func enqueue() throws -> Int {
        let now = clockMicros()
        let window = options.notifyWindowMicros
        let limit = options.rowsPerRoundMax
        var generation: String?
        let (read, cursor, queued, withheld) = try client.transaction {
            connection -> (Int, Int64, Int, Int) in
            guard let start = try Self.readCursor(connection) else { return (0, 0, 0, 0) }
            var cursor = start.lastTransitionID
            let rows = try connection.execute(
                """
                SELECT id, geofence_id, device_id, event, recorded_at, received_at, fix_accuracy_m, log_offset,
                    fix_index
                FROM \(GeofenceSchema.Table.transitions.qualified) WHERE id > $1 ORDER BY id LIMIT $2
                """, [.int64(cursor), .int64(Int64(limit))])
            var queued = 0
            var withheld = 0
            let registryEnd = self.registryEnd?()
            var looked = 0
            for index in 0..<rows.rowCount {
                let row = try Self.transitionRow(rows, index)
                // The next round takes it, once the follower got there.
                if let registryEnd, UInt64(bitPattern: row.logOffset) >= registryEnd { break }
                looked += 1
                cursor = max(cursor, row.id)
                guard row.recordedAtMicros >= now - window else { continue }
                switch target(of: row, now: now) {
                case .none: continue
                case .withheld: withheld += 1
                case .send(let fenceName, let deviceName, let settings):
                    queued += try Self.queueDeliveries(
                        row, fenceName: fenceName, deviceName: deviceName, settings: settings, now: now,
                        connection)
                }
            }
            _ = try connection.execute(
                """
                INSERT INTO \(AlertTables.cursor) (name, generation, last_transition_id) VALUES ($1, $2, $3)
                ON CONFLICT (name) DO UPDATE SET generation = excluded.generation,
                    last_transition_id = excluded.last_transition_id
                """, [.text(AlertTables.cursorName), .text(start.generation), .int64(cursor)])
            generation = start.generation
            return (looked, cursor, queued, withheld)
        }
        // Known once committed (a rollback leaves the stored cursor where it was).
        followed.withLock { $0.transitions = generation.map { ($0, cursor) } }
        counters.withLock {
            $0.cursor = cursor
            $0.queued += queued
            $0.withheld += withheld
        }
        return read
    }

    /// The cursor, locked for the transaction: the generation of the geofence projection and the
    /// last transition queued from it (0 when the stored cursor is of another generation); nil
    /// before the geofence projection made its tables, when there is nothing to follow.
    static func readCursor(_ connection: PostgresConnection, name: String = AlertTables.cursorName) throws
        -> (
            generation: String, lastTransitionID: Int64
        )?
    {
        guard
            try connection.execute(
                "SELECT to_regclass($1) IS NOT NULL", [.text(GeofenceSchema.Table.transitions.qualified)]
            ).bool(0, 0) == true
        else { return nil }
        let generation =
            try connection.execute(
                "SELECT created_at::text FROM findmy_meta.generations WHERE schema_name = $1",
                [.text(GeofenceSchema.schema)]
            ).string(0, 0) ?? ""
        let stored = try connection.execute(
            "SELECT generation, last_transition_id FROM \(AlertTables.cursor) WHERE name = $1 FOR UPDATE",
            [.text(name)])
        guard stored.rowCount == 1, stored.string(0, 0) == generation else { return (generation, 0) }
        return (generation, try stored.int64(0, 1) ?? 0)
    }

    private static func transitionRow(_ rows: PostgresResult, _ index: Int) throws -> TransitionRow {
        TransitionRow(
            id: try rows.int64(index, 0) ?? 0,
            geofenceID: UInt64(bitPattern: try rows.int64(index, 1) ?? 0),
            deviceID: UInt64(bitPattern: try rows.int64(index, 2) ?? 0),
            event: rows.string(index, 3) ?? "",
            recordedAtMicros: try rows.timestampMicros(index, 4) ?? 0,
            receivedAtMicros: try rows.timestampMicros(index, 5) ?? 0,
            fixAccuracyMeters: try rows.double(index, 6) ?? .nan,
            logOffset: try rows.int64(index, 7) ?? 0,
            fixIndex: Int32(truncatingIfNeeded: try rows.int64(index, 8) ?? 0))
    }

    /// Decided from the registry as it is now: the fence and its channels, and whether its owner
    /// may see the device at the time the transition arrived.
    private func target(of row: TransitionRow, now: Int64) -> Target {
        identity.store.registry.read { state -> Target in
            guard let fence = state.registry.geofences.fences[row.geofenceID],
                let settings = state.registry.geofenceNotifications[row.geofenceID]
            else { return .none }
            guard
                state.registry.visibility(
                    of: row.deviceID, to: fence.ownerUserID, atMicros: now,
                    sinceMicros: row.receivedAtMicros) != nil
            else { return .withheld }
            let device = state.registry.devices[row.deviceID]?.name ?? "device \(row.deviceID)"
            return .send(fenceName: fence.name, deviceName: device, settings: settings)
        }
    }

    /// One delivery per channel the fence announces on; returns the deliveries queued.
    private static func queueDeliveries(
        _ row: TransitionRow, fenceName: String, deviceName: String, settings: GeofenceNotificationsSet,
        now: Int64, _ connection: PostgresConnection
    ) throws -> Int {
        var queued = 0
        if !settings.webhookURL.isEmpty {
            let body = AlertMessages.webhookBody(row, fenceName: fenceName, deviceName: deviceName)
            queued += try insert(
                row, channel: "webhook", url: settings.webhookURL, body: body, title: "", tags: "",
                now: now, connection)
        }
        if !settings.ntfyURL.isEmpty {
            let (title, tags, body) = AlertMessages.ntfy(row, fenceName: fenceName, deviceName: deviceName)
            queued += try insert(
                row, channel: "ntfy", url: settings.ntfyURL, body: body, title: title, tags: tags,
                now: now, connection)
        }
        return queued
    }

    /// What becomes of one transition: nothing (its fence is gone or announces nowhere), nothing
    /// because its fence's owner may not see the device, or deliveries.
    enum Target {
        case none
        case withheld
        case send(fenceName: String, deviceName: String, settings: GeofenceNotificationsSet)
    }

    static func insert(
        _ row: TransitionRow, channel: String, url: String, body: [UInt8], title: String, tags: String,
        now: Int64, _ connection: PostgresConnection
    ) throws -> Int {
        try connection.execute(
            """
            INSERT INTO \(AlertTables.deliveries) (geofence_id, device_id, transition_id, event, recorded_at_micros,
                channel, url, idempotency_key, body, title, tags, state, next_attempt_micros, created_micros)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending', $12, $12)
            ON CONFLICT (idempotency_key, channel) DO NOTHING
            """,
            [
                .int64(Int64(bitPattern: row.geofenceID)), .int64(Int64(bitPattern: row.deviceID)),
                .int64(row.id),
                .text(row.event), .int64(row.recordedAtMicros), .text(channel), .text(url),
                .text(row.idempotencyKey), .bytes(body), .text(title), .text(tags), .int64(now),
            ]
        ).affectedRows
    }

    // MARK: sending

    struct Due: Sendable {
        var id: Int64
        var geofenceID: UInt64
        var channel: String
        var url: String
        var key: String
        var body: [UInt8]
        var title: String
        var tags: String
        var attempts: Int
        var deviceID: UInt64

        /// A found notice's delivery: `geofence_id` 0, which no fence has (their ids start at 1).
        var isFoundNotice: Bool { geofenceID == 0 }
    }

    /// Sends the deliveries that are due and not in flight, without waiting for their answers.
    /// Returns how many were sent, and when the next pending one not in flight is due (nil: none).
    func deliverDue() throws -> (sent: Int, nextDueMicros: Int64?) {
        let now = clockMicros()
        let inFlight = flight.withLock { $0.ids }
        let room = options.rowsPerRoundMax - inFlight.count
        let busy = PostgresValue.array(PostgresArray(.bigint, inFlight.map { .int64($0) }))
        guard room > 0 else { return (0, nil) }
        let result = try client.execute(
            """
            SELECT id, geofence_id, channel, url, idempotency_key, body, title, tags, attempts, device_id
            FROM \(AlertTables.deliveries)
            WHERE state = 'pending' AND next_attempt_micros <= $1 AND id <> ALL($3::bigint[])
            ORDER BY next_attempt_micros, id LIMIT $2
            """, [.int64(now), .int64(Int64(room)), busy])
        var due: [Due] = []
        for index in 0..<result.rowCount {
            due.append(
                Due(
                    id: try result.int64(index, 0) ?? 0,
                    geofenceID: UInt64(bitPattern: try result.int64(index, 1) ?? 0),
                    channel: result.string(index, 2) ?? "", url: result.string(index, 3) ?? "",
                    key: result.string(index, 4) ?? "", body: try result.bytes(index, 5) ?? [],
                    title: result.string(index, 6) ?? "", tags: result.string(index, 7) ?? "",
                    attempts: Int(try result.int64(index, 8) ?? 0),
                    deviceID: UInt64(bitPattern: try result.int64(index, 9) ?? 0)))
        }
        due = try withholdUnseen(due, now: now)
        flight.withLock { flight in
            for delivery in due { flight.ids.insert(delivery.id) }
        }
        for delivery in due { send(delivery) }
        let allInFlight = flight.withLock { $0.ids }
        let next = try client.execute(
            """
            SELECT min(next_attempt_micros) FROM \(AlertTables.deliveries)
            WHERE state = 'pending' AND id <> ALL($1::bigint[])
            """, [.array(PostgresArray(.bigint, allInFlight.map { .int64($0) }))])
        return (due.count, try next.int64(0, 0))
    }

    /// `due` without the deliveries whose fence's owner may no longer see the device (or whose fence
    /// is gone), which are deleted unsent: asked again right before sending, because a retry may
    /// fall due long after the share it was queued under ended.
    func withholdUnseen(_ due: [Due], now: Int64) throws -> [Due] {
        let seen = identity.store.registry.read { state in
            due.map { delivery -> Bool in
                if delivery.isFoundNotice {
                    return Self.foundNoticeOwner(delivery.deviceID, state.registry) != nil
                }
                guard let fence = state.registry.geofences.fences[delivery.geofenceID] else { return false }
                return state.registry.visibility(of: delivery.deviceID, to: fence.ownerUserID, atMicros: now)
                    != nil
            }
        }
        let unseen = zip(due, seen).filter { !$1 }.map { $0.0.id }
        guard !unseen.isEmpty else { return due }
        let deleted = try client.execute(
            "DELETE FROM \(AlertTables.deliveries) WHERE id = ANY($1::bigint[]) AND state = 'pending'",
            [.array(PostgresArray(.bigint, unseen.map { .int64($0) }))]
        ).affectedRows
        counters.withLock { $0.withheld += deleted }
        StructuredLog.info("geofence_notifications_withheld", ["deliveries": .int(Int64(deleted))])
        return zip(due, seen).filter { $1 }.map { $0.0 }
    }

    /// Sends one delivery; its answer is kept for the worker, which the answer wakes.
    func send(_ delivery: Due) {
        http.send(request(delivery)) { [self] outcome in
            flight.withLock { $0.answered.append((delivery, outcome)) }
            bell.ring()
        }
    }

    /// The delay before retry `attempt` (1 for the first retry): base × 2^(attempt − 1), at most the maximum.
    public static func retryDelayMicros(attempt: Int, options: Options) -> Int64 {
        let shift = min(max(attempt - 1, 0), 40)
        let delay = options.retryBaseMicros.multipliedReportingOverflow(by: Int64(1) << shift)
        return delay.overflow
            ? options.retryDelayMicrosMax : min(delay.partialValue, options.retryDelayMicrosMax)
    }

    func record(_ delivery: Due, _ outcome: Result<IncomingResponse, TransportFailure>, now: Int64) throws {
        let attempts = delivery.attempts + 1
        var status: Int64?
        var error: String?
        switch outcome {
        case .success(let response):
            status = Int64(response.status)
            // The status alone: the receiver's body is a foreign server's words, and a URL a user
            // chose could make them the answer of a service only this server reaches.
            if !(200..<300).contains(response.status) { error = "answered \(response.status)" }
        case .failure(let failure):
            error = failure.message
        }
        let state: String
        if error == nil {
            state = "delivered"
        } else if attempts >= options.attemptsMax {
            state = "failed"
        } else {
            state = "pending"
        }
        let next = now + Self.retryDelayMicros(attempt: attempts, options: options)
        _ = try client.execute(
            """
            UPDATE \(AlertTables.deliveries) SET state = $2, attempts = $3, last_status = $4, last_error = $5,
                next_attempt_micros = $6, finished_micros = CASE WHEN $2 = 'pending' THEN NULL ELSE $7 END
            WHERE id = $1
            """,
            [
                .int64(delivery.id), .text(state), .int64(Int64(attempts)), status.map { .int64($0) },
                error.map { .text($0) }, .int64(state == "pending" ? next : now), .int64(now),
            ])
        counters.withLock {
            switch state {
            case "delivered": $0.delivered += 1
            case "failed":
                $0.failedAttempts += 1
                $0.givenUp += 1
            default: $0.failedAttempts += 1
            }
        }
        StructuredLog.info(
            "geofence_notification",
            [
                "delivery": .int(delivery.id), "channel": .string(delivery.channel), "state": .string(state),
                "attempts": .int(Int64(attempts)), "status": .int(status ?? 0), "error": .string(error ?? ""),
            ])
    }

    // MARK: status

    public func health() -> (degraded: Bool, members: [(String, JSONValue)]) {
        let c = counters.withLock { $0 }
        var members: [(String, JSONValue)] = [
            ("state", .string(state == .running ? "running" : "stopped")),
            ("cursor", .integer(c.cursor)), ("rounds", .integer(Int64(c.rounds))),
            ("queued", .integer(Int64(c.queued))), ("delivered", .integer(Int64(c.delivered))),
            ("failed_attempts", .integer(Int64(c.failedAttempts))), ("given_up", .integer(Int64(c.givenUp))),
            ("withheld", .integer(Int64(c.withheld))),
        ]
        if options.leaseClass != nil { members.append(("lease", .string(c.holdsLease ? "held" : "waiting"))) }
        if let error = c.lastError { members.append(("last_error", .string(error))) }
        return (c.lastError != nil, members)
    }

    public func metricsText() -> String {
        let c = counters.withLock { $0 }
        return """
            # HELP findmy_geofence_notifications_delivered_total Notifications a receiver accepted (2xx).
            # TYPE findmy_geofence_notifications_delivered_total counter
            findmy_geofence_notifications_delivered_total \(c.delivered)
            # HELP findmy_geofence_notifications_failed_attempts_total Sends that failed (retried or given up).
            # TYPE findmy_geofence_notifications_failed_attempts_total counter
            findmy_geofence_notifications_failed_attempts_total \(c.failedAttempts)
            # HELP findmy_geofence_notifications_given_up_total Deliveries that failed every attempt.
            # TYPE findmy_geofence_notifications_given_up_total counter
            findmy_geofence_notifications_given_up_total \(c.givenUp)
            # HELP findmy_geofence_notifications_withheld_total Transitions not announced and deliveries deleted unsent: the fence's owner may no longer see the device.
            # TYPE findmy_geofence_notifications_withheld_total counter
            findmy_geofence_notifications_withheld_total \(c.withheld)

            """
    }
}
