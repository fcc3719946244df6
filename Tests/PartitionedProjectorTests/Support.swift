import Events
import Foundation
import NATSLog
import NATSSupport
import Postgres
@_exported import TestSupport
import Testing
import Threads

/// User 1 and devices 1...devices, received at `atMicros`.
func registry(devices: Int, atMicros: Int64) -> [EncodedEvent] {
    var events = [
        EventCodec.encode(
            .userCreated(
                UserCreated(userID: 1, name: "ada", role: .member, tokenHash: Array(repeating: 7, count: 32))),
            receivedAtMicros: atMicros)
    ]
    for device in 1...devices {
        events.append(
            EventCodec.encode(
                .deviceEnrolled(
                    DeviceEnrolled(
                        deviceID: UInt64(device), userID: 1, deviceUUID: UUID128.random(),
                        name: "device \(device)",
                        platform: "ios", model: "test")),
                receivedAtMicros: atMicros))
    }
    return events
}

/// A fix batch of `device` with fixes recorded at `recordedAtMicros`, received at `receivedAtMicros`.
func fixBatch(device: UInt64, recordedAtMicros: [Int64], receivedAtMicros: Int64, salt: Int = 0)
    -> EncodedEvent
{
    let fixes = recordedAtMicros.enumerated().map { index, recorded in
        Fix(
            latitude: 52.5 + Double(device) * 0.01 + Double(index) * 0.0001 + Double(salt) * 0.000_001,
            longitude: 13.4 + Double(recorded % 1_000_000_000) * 0.000_000_001, accuracyMeters: 10,
            batteryPercent: 80, source: "significant", recordedAtMicros: recorded)
    }
    return EventCodec.encode(
        .fixBatch(FixBatch(deviceID: device, batchID: UUID128.random(), fixes: fixes)),
        receivedAtMicros: receivedAtMicros)
}

func count(_ connection: PostgresConnection, _ sql: String) throws -> Int {
    Int(try connection.execute(sql).int64(0, 0) ?? -1)
}

/// Batches in the projection's `device_batches` (0 before the projector made its schema).
func folded(_ connection: PostgresConnection) throws -> Int {
    let exists = try connection.execute("SELECT to_regclass('findmy.device_batches') IS NOT NULL")
    guard exists.string(0, 0) == "t" else { return 0 }
    return try count(connection, "SELECT count(*) FROM findmy.device_batches")
}
