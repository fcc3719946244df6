import Events
import Postgres

// The `commands` and `command_deliveries` tables: one statement per command event, in
// log order. A command's state only moves forward: pending → sent or failed; a later send makes a
// failed command sent; answered and expired are final (docs/commands.md, "States").

extension ProjectionStore {
    func apply(_ change: CommandChange, _ connection: PostgresConnection) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        let at: PostgresValue = .timestamp(micros: change.receivedAtMicros)
        func id(_ uuid: UUID128) -> PostgresValue { .uuid(high: uuid.high, low: uuid.low) }
        switch change.event {
        case .commandRequested(let c):
            _ = try connection.execute(
                """
                INSERT INTO \(s).commands (command_id, device_id, kind, message, phone, requested_by, requested_at,
                    log_offset, state)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending') ON CONFLICT (command_id) DO NOTHING
                """,
                [
                    id(c.commandID), .int64(Int64(c.deviceID)), .text(c.kind.name), .text(c.message),
                    .text(c.phone), .int64(Int64(c.requestedByUserID)),
                    .timestamp(micros: c.requestedAtMicros),
                    .int64(Int64(change.offset)),
                ])
        case .commandSent(let c):
            try delivery(
                c.commandID, c.deviceID, change, channel: c.channel, state: "sent", detail: c.providerID,
                retryAt: nil, addressDead: false, connection)
            _ = try connection.execute(
                "UPDATE \(s).commands SET state = 'sent' WHERE command_id = $1 AND state IN ('pending', 'failed')",
                [id(c.commandID)])
        case .commandDeliveryFailed(let c):
            try delivery(
                c.commandID, c.deviceID, change, channel: c.channel, state: "failed", detail: c.reason,
                retryAt: c.retryAtMicros, addressDead: c.addressDead, connection)
            // A failure with a retry to come leaves the command pending.
            if c.retryAtMicros == nil {
                _ = try connection.execute(
                    "UPDATE \(s).commands SET state = 'failed' WHERE command_id = $1 AND state = 'pending'",
                    [id(c.commandID)])
            }
        case .commandAnswered(let c):
            _ = try connection.execute(
                """
                UPDATE \(s).commands SET state = 'answered', answered_at = $2, answer_log_offset = $3,
                    answer_fix_index = $4, answer_protocol = $5
                WHERE command_id = $1 AND state NOT IN ('answered', 'expired')
                """,
                [
                    id(c.commandID), at, .int64(Int64(c.batchOffset)), .int64(Int64(c.fixIndex)),
                    .text(c.clientProtocol.name),
                ])
        case .commandExpired(let c):
            _ = try connection.execute(
                """
                UPDATE \(s).commands SET state = 'expired', ended_at = $2, end_reason = $3
                WHERE command_id = $1 AND state NOT IN ('answered', 'expired')
                """, [id(c.commandID), at, .text(c.reason)])
        default:
            preconditionFailure("not a command event")
        }
    }

    private func delivery(
        _ command: UUID128, _ device: UInt64, _ change: CommandChange, channel: String, state: String,
        detail: String, retryAt: Int64?, addressDead: Bool, _ connection: PostgresConnection
    ) throws {
        let s = PostgresConnection.quoteIdentifier(schema)
        _ = try connection.execute(
            """
            INSERT INTO \(s).command_deliveries (log_offset, command_id, device_id, channel, state, at, detail,
                retry_at, address_dead)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (log_offset) DO NOTHING
            """,
            [
                .int64(Int64(change.offset)), .uuid(high: command.high, low: command.low),
                .int64(Int64(device)), .text(channel), .text(state),
                .timestamp(micros: change.receivedAtMicros),
                .text(detail), retryAt.map { .timestamp(micros: $0) }, .bool(addressDead),
            ])
    }
}
