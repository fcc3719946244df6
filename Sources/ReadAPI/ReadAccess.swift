import Identity

/// Who may read which device: every read route goes through `scope(of:)` and
/// `device(_:visibleTo:)`, which apply the registry's one rule (`Registry.visibility`): a reader
/// sees its own devices and the devices shared with it while the share is active. An administrator
/// gets no exception (docs/privacy.md). The permission table (`RoutePermissions`) checks the same
/// rule before a handler runs; this is the second, independent check.
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

    /// `deviceID` parsed from the path, if `reader` may read it, with the owner's name when shared.
    /// A device of someone else and a device that does not exist give the same 404, body included,
    /// so that ids cannot be probed.
    func device(_ pathID: String?, visibleTo reader: UInt64) throws(APIError) -> (
        id: UInt64, sharedBy: String?
    ) {
        guard let pathID, let deviceID = UInt64(pathID),
            let visible = identity.visibility(of: deviceID, to: reader)
        else { throw Self.notFound }
        return (deviceID, visible.sharedByUserID.map { identity.userName($0) ?? "" })
    }

    static let notFound = APIError.deviceNotFound
}
