import Core
import Events
import Foundation
import Identity

/// An identity service over a fresh event log in a temporary directory, for tests of the read
/// side that need users, devices and shares but no server. `close()` closes the log and removes
/// the directory.
final class ScratchIdentity {
    let directory: String
    let identity: IdentityService

    init(clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros) throws {
        directory = NSTemporaryDirectory() + "findmy-readapi-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var options = LogOptions()
        options.diagnostics = { _ in }
        identity = try IdentityService(
            log: try LogWriter(directory: directory + "/log", options: options), clockMicros: clockMicros)
    }

    /// Device `deviceID` of `userID`, enrolled as the registry learns it from the log.
    func enrol(deviceID: UInt64, userID: UInt64) throws {
        _ = try identity.appendAndApply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: deviceID, userID: userID, deviceUUID: UUID128.random(), name: "phone",
                    platform: "ios", model: "")), receivedAtMicros: identity.clockMicros())
    }

    func close() {
        identity.store.writer.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
