import Events
import Identity
import Testing

/// The gate checks that the caller owns a device before a share is written; the device can be
/// removed between that check and the write. The share must then be refused as an unknown device,
/// not stop the server (it was a `precondition`).
@Suite struct ShareRemovedDeviceTests {
    @Test func sharingADeviceRemovedAfterTheGateIsA404() throws {
        let scratch = try ScratchIdentity()
        defer { scratch.close() }
        let identity = scratch.identity
        let olga = try identity.createUser(name: "olga", role: .member)
        _ = try identity.createUser(name: "mia", role: .member)
        try scratch.enrol(deviceID: 7, userID: olga.userID)
        _ = try identity.appendAndApply(
            .deviceRemoved(DeviceRemoved(deviceID: 7)), receivedAtMicros: identity.clockMicros())
        #expect(throws: APIError.deviceNotFound) {
            _ = try identity.shareDevice(7, owner: olga.userID, withUser: "mia", untilMicros: nil)
        }
        #expect(identity.registrySnapshot.shares[7] == nil)
    }
}
