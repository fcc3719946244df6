import Core
import Identity

/// Who may read which device, by the registry's one rule (`Registry.visibility`): a reader sees its
/// own devices and the devices shared with it while the share is active. An administrator gets no
/// exception (docs/privacy.md). The gate applies it to a device's routes (`.viewer`) and hands the
/// handler the device it found; the devices list applies it here, through `scope(of:)`.
struct ReadAccess: Sendable {
    let identity: IdentityService

    /// What `reader` may read now: device ids, and for a shared device the owner's name.
    struct ReadScope: Sendable {
        /// Ascending.
        var deviceIDs: [UInt64]
        var sharedBy: [UInt64: String]

        func contains(_ deviceID: UInt64) -> Bool { index(of: deviceID) != nil }

        /// Where `deviceID` is in `deviceIDs`, by binary search.
        func index(of deviceID: UInt64) -> Int? {
            var low = 0
            var high = deviceIDs.count
            while low < high {
                let middle = (low + high) / 2
                if deviceIDs[middle] < deviceID { low = middle + 1 } else { high = middle }
            }
            return low < deviceIDs.count && deviceIDs[low] == deviceID ? low : nil
        }
    }

    func scope(of reader: UInt64) -> ReadScope {
        let visible = identity.visibleDevices(to: reader)
        var sharedBy: [UInt64: String] = [:]
        for device in visible {
            if let owner = device.sharedByUserID {
                sharedBy[device.deviceID] = identity.userName(owner) ?? ""
            }
        }
        return ReadScope(deviceIDs: visible.map(\.deviceID), sharedBy: sharedBy)
    }

    /// The owner's name of a device shared with the reader, nil for the reader's own.
    func sharedBy(_ visible: Registry.VisibleDevice) -> String? {
        visible.sharedByUserID.map { identity.userName($0) ?? "" }
    }

    static let notFound = APIError.deviceNotFound
}
