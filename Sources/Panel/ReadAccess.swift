import Ingest

/// Who may read which device: the one place the rule lives (DESIGN.md, "who can see whom").
///
/// Today a reader sees exactly the devices it enrolled. Sharing comes with issue 5 and extends
/// `ReadScope` here; an administrator gets no exception (it does not see others' locations unless
/// they were shared). Every read route goes through `scope(of:)` and `device(_:visibleTo:)`.
struct ReadAccess: Sendable {
    let ingest: IngestService

    /// What `reader` may read: the owners whose devices it sees.
    struct ReadScope: Sendable {
        var ownerIDs: [UInt64]
        func includes(owner: UInt64) -> Bool { ownerIDs.contains(owner) }
    }

    func scope(of reader: UInt64) -> ReadScope { ReadScope(ownerIDs: [reader]) }

    /// `deviceID` parsed from the path, if `reader` may read it. A device of someone else and a
    /// device that does not exist give the same 404, body included, so that ids cannot be probed.
    func device(_ pathID: String?, visibleTo reader: UInt64) throws(APIError) -> UInt64 {
        guard let pathID, let deviceID = UInt64(pathID), let owner = ingest.deviceOwner(deviceID),
            scope(of: reader).includes(owner: owner)
        else { throw Self.notFound }
        return deviceID
    }

    static let notFound = APIError(
        status: 404, code: "device_not_found",
        message:
            "no device with this id among the devices you can see; list yours with GET /api/find-my/devices")
}
