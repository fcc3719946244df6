import Events
import Postgres

/// "Notify when found" in the geofence projection (docs/found-notices.md): the same rule the
/// registry folds (Core's FoundNotices.swift), decided here in log order so that a rebuild finds
/// the same notices. Event 42 arms or disarms a device (`found_notice_armed`); the device's first
/// batch with an accepted fix at a later offset writes one `found_notices` row (its newest fix)
/// and disarms it; removing the device disarms it (`GeofenceRun.remove`). The notifier follows
/// `found_notices` by id and decides who hears of it.
///
/// Arming and firing are rare, so each writes at once rather than with the transaction's batched
/// rows; a batch of a device with no armed notice costs one dictionary lookup.
extension GeofenceRun {
    mutating func setFoundNotice(_ set: FoundNoticeSet, offset: UInt64, receivedAtMicros: Int64) throws {
        let device = PostgresValue.int64(Int64(bitPattern: set.deviceID))
        guard set.armed else {
            cache.armedNotices[set.deviceID] = nil
            _ = try connection.execute("DELETE FROM \(s).found_notice_armed WHERE device_id = $1", [device])
            return
        }
        cache.armedNotices[set.deviceID] = GeofenceCache.ArmedNotice(userID: set.userID, armedOffset: offset)
        _ = try connection.execute(
            """
            INSERT INTO \(s).found_notice_armed (device_id, user_id, armed_offset, armed_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (device_id) DO UPDATE SET user_id = excluded.user_id, armed_offset = excluded.armed_offset,
                armed_at = excluded.armed_at
            """,
            [
                device, .int64(Int64(bitPattern: set.userID)), .int64(Int64(offset)),
                .timestamp(micros: receivedAtMicros),
            ])
    }

    mutating func fireFoundNotice(_ report: GeofenceBatch.ReportRow) throws {
        guard let notice = cache.armedNotices[report.deviceID], report.logOffset > notice.armedOffset else {
            return
        }
        cache.armedNotices[report.deviceID] = nil
        let device = PostgresValue.int64(Int64(bitPattern: report.deviceID))
        _ = try connection.execute("DELETE FROM \(s).found_notice_armed WHERE device_id = $1", [device])
        _ = try connection.execute(
            """
            INSERT INTO \(s).found_notices (device_id, user_id, armed_offset, log_offset, recorded_at, received_at,
                latitude, longitude, accuracy_m)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            """,
            [
                device, .int64(Int64(bitPattern: notice.userID)), .int64(Int64(notice.armedOffset)),
                .int64(Int64(report.logOffset)), .timestamp(micros: report.recordedAtMicros),
                .timestamp(micros: report.receivedAtMicros), report.latitude.map { .double($0) },
                report.longitude.map { .double($0) },
                report.accuracyMeters.map { .double($0) },
            ])
    }
}
