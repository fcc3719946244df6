import Core
import Events
import Postgres
import ProjectionSchema

/// "Notify when found", the sending side (docs/found-notices.md): the notifier follows the geofence
/// projection's `found_notices` by id with a second cursor row (`found_notices`), and queues each
/// notice's deliveries into the same `deliveries` table as a fence's transitions, so they are sent,
/// retried and recorded exactly alike. A delivery goes to the device owner's alert targets as they
/// are when it is queued. Only a notice whose batch arrived within the notify window is sent: a
/// rebuild replays old history, and must not announce it again.
extension GeofenceNotifier {
    /// Reads the notices after the cursor and writes their deliveries and the new cursor in one
    /// transaction. Returns the notices looked at.
    func enqueueFoundNotices() throws -> Int {
        let now = clockMicros()
        let window = options.notifyWindowMicros
        let limit = options.rowsPerRoundMax
        let registryEnd = self.registryEnd?()
        var written: (generation: String, id: Int64)?
        let (looked, queued, withheld) = try client.transaction { connection -> (Int, Int, Int) in
            // Before the projection's version 3 tables exist there is nothing to follow.
            guard
                try connection.execute(
                    "SELECT to_regclass($1) IS NOT NULL", [.text(GeofenceSchema.Table.foundNotices.qualified)]
                ).bool(0, 0) == true,
                let start = try Self.readCursor(connection, name: AlertTables.foundCursorName)
            else { return (0, 0, 0) }
            var cursor = start.lastTransitionID
            let rows = try connection.execute(
                """
                SELECT id, device_id, user_id, log_offset, recorded_at, received_at, latitude, longitude, accuracy_m
                FROM \(GeofenceSchema.Table.foundNotices.qualified) WHERE id > $1 ORDER BY id LIMIT $2
                """, [.int64(cursor), .int64(Int64(limit))])
            var looked = 0
            var queued = 0
            var withheld = 0
            for index in 0..<rows.rowCount {
                // nil: fired by a batch whose fixes were compacted away (erased) before the fold;
                // a notice with no position to tell is not sent.
                let found = try Self.foundNoticeRow(rows, index)
                let offset = UInt64(try rows.int64(index, 3) ?? 0)
                // The next round takes it, once the follower got there.
                if let registryEnd, offset >= registryEnd { break }
                looked += 1
                cursor = max(cursor, try rows.int64(index, 0) ?? 0)
                guard let notice = found, notice.receivedAtMicros >= now - window else { continue }
                let target = identity.store.registry.read { state in
                    Self.foundNoticeOwner(notice.deviceID, state.registry).flatMap { owner in
                        owner.id == notice.userID
                            ? (owner, state.registry.devices[notice.deviceID]?.name ?? "") : nil
                    }
                }
                guard let (owner, deviceName) = target else {
                    withheld += 1
                    continue
                }
                queued += try queueFoundNotice(
                    notice, owner: owner, deviceName: deviceName, now: now, connection)
            }
            _ = try connection.execute(
                """
                INSERT INTO \(AlertTables.cursor) (name, generation, last_transition_id) VALUES ($1, $2, $3)
                ON CONFLICT (name) DO UPDATE SET generation = excluded.generation,
                    last_transition_id = excluded.last_transition_id
                """, [.text(AlertTables.foundCursorName), .text(start.generation), .int64(cursor)])
            written = (start.generation, cursor)
            return (looked, queued, withheld)
        }
        followed.withLock { $0.foundNotices = written }
        counters.withLock {
            $0.queued += queued
            $0.withheld += withheld
        }
        return looked
    }

    /// The owner of `deviceID` while the device lives: the only one who hears it was found (the
    /// API lets only the owner arm it; a removed device's notices are withheld).
    static func foundNoticeOwner(_ deviceID: UInt64, _ registry: Registry) -> Registry.User? {
        registry.liveDevice(deviceID).flatMap { registry.users[$0.userID] }
    }

    private static func foundNoticeRow(_ rows: PostgresResult, _ index: Int) throws -> FoundNoticeRow? {
        guard let latitude = try rows.double(index, 6), let longitude = try rows.double(index, 7) else {
            return nil
        }
        return FoundNoticeRow(
            id: try rows.int64(index, 0) ?? 0, deviceID: UInt64(bitPattern: try rows.int64(index, 1) ?? 0),
            userID: UInt64(bitPattern: try rows.int64(index, 2) ?? 0),
            logOffset: UInt64(try rows.int64(index, 3) ?? 0),
            recordedAtMicros: try rows.timestampMicros(index, 4) ?? 0,
            receivedAtMicros: try rows.timestampMicros(index, 5) ?? 0,
            latitude: latitude,
            longitude: longitude, accuracyMeters: try rows.double(index, 8))
    }

    /// One delivery per alert target the owner has now; returns the deliveries queued.
    private func queueFoundNotice(
        _ notice: FoundNoticeRow, owner: Registry.User, deviceName: String, now: Int64,
        _ connection: PostgresConnection
    ) throws -> Int {
        let name = deviceName.isEmpty ? "device \(notice.deviceID)" : deviceName
        var deliveries: [(channel: String, url: String, body: [UInt8], title: String, tags: String)] = []
        if !owner.notifyWebhookURL.isEmpty {
            deliveries.append(
                (
                    "webhook", owner.notifyWebhookURL,
                    FoundNoticeMessages.webhookBody(notice, deviceName: name), "", ""
                ))
        }
        if !owner.notifyNtfyURL.isEmpty {
            let (title, tags, body) = FoundNoticeMessages.ntfy(notice, deviceName: name)
            deliveries.append(("ntfy", owner.notifyNtfyURL, body, title, tags))
        }
        var queued = 0
        for delivery in deliveries {
            queued += try connection.execute(
                """
                INSERT INTO \(AlertTables.deliveries) (geofence_id, device_id, transition_id, event, recorded_at_micros,
                    channel, url, idempotency_key, body, title, tags, state, next_attempt_micros, created_micros)
                VALUES (\(AlertTables.foundNoticeGeofenceID), $1, $2, 'found', $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $10)
                ON CONFLICT (idempotency_key, channel) DO NOTHING
                """,
                [
                    .int64(Int64(bitPattern: notice.deviceID)), .int64(notice.id),
                    .int64(notice.recordedAtMicros),
                    .text(delivery.channel), .text(delivery.url), .text(notice.idempotencyKey),
                    .bytes(delivery.body),
                    .text(delivery.title), .text(delivery.tags), .int64(now),
                ]
            ).affectedRows
        }
        return queued
    }
}
