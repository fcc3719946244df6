import Core
import Events
import HTTP
import JSON

/// Sharing a device with another user: granting, revoking and listing shares. Only a device's
/// owner reaches these (the gate has checked `.owner`); docs/privacy.md says what a share shows.
extension IdentityService {
    func grantShare(_ request: HTTPRequest, _ caller: GateCaller) throws(APIError) -> HTTPResponse {
        let (owner, deviceID) = (caller.userID, caller.deviceID)
        let object = try parseObject(request.body, allowed: ["user", "until", "permission"])
        let name = try field { () throws(JSONAccessError) in try object.string("user") }
        let untilText = try field { () throws(JSONAccessError) in try object.stringIfPresent("until") }
        let permissionText = try field { () throws(JSONAccessError) in
            try object.stringIfPresent("permission")
        }
        var until: Int64?
        if let untilText {
            do {
                until = try RFC3339.parseMicros(untilText)
            } catch {
                throw .badRequest(.invalidUntil, "until must be an RFC 3339 time: \(error.description)")
            }
        }
        var permission: SharePermission?
        if let permissionText {
            guard let parsed = SharePermission(rawValue: permissionText) else {
                throw .badRequest(
                    .invalidField,
                    "permission is \"see\" (read positions only, the default) or \"locate\" (also send locate, sound and lost), got '\(permissionText.prefix(32))'"
                )
            }
            permission = parsed
        }
        let (grantee, offset) = try shareDevice(
            deviceID, owner: owner, withUser: name, untilMicros: until, permission: permission)
        let granted = store.registry.read { $0.registry.shares[deviceID]?[grantee.id]?.mayLocate ?? false }
        var writer = JSONWriter(capacity: 128)
        writer.beginObject()
        writer.key("user")
        writer.string(grantee.name)
        writer.key("until")
        if let until { writer.string(RFC3339.formatMicros(until)) } else { writer.null() }
        writer.key("permission")
        writer.string(granted ? SharePermission.locate.rawValue : SharePermission.see.rawValue)
        writer.key("offset")
        writer.int64(Int64(offset))
        writer.endObject()
        return .json(writer.bytes, status: 201)
    }

    /// Lets user `name` see `deviceID` until `untilMicros` (nil: until revoked), and with
    /// `permission` also locate it (nil: a new share sees only, an existing one keeps what it had).
    /// The caller has checked that `owner` owns the device. Used by the API and by the panel's share form.
    public func shareDevice(
        _ deviceID: UInt64, owner: UInt64, withUser name: String, untilMicros until: Int64?,
        permission: SharePermission? = nil
    )
        throws(APIError) -> (grantee: Registry.User, offset: UInt64)
    {
        let now = clockMicros()
        if let until, until <= now {
            throw .badRequest(.invalidUntil, "until (\(RFC3339.formatMicros(until))) is not in the future")
        }
        let grantee = try existingUser(name)
        guard grantee.id != owner else {
            throw .badRequest(.invalidField, "you see your own devices already; share with another user")
        }
        let offset = try store.mutations.withLock { _ throws(APIError) in
            // The gate saw the owner; the device may have been removed since. Checked again under
            // the mutations lock, where no removal can interleave, and answered as any unknown device.
            guard deviceOwner(deviceID) == owner else { throw APIError.deviceNotFound }
            var offset = try appendAndApply(
                .shareGranted(
                    ShareGranted(deviceID: deviceID, granteeUserID: grantee.id, untilMicros: until)),
                receivedAtMicros: now)
            let had = store.registry.read { $0.registry.shares[deviceID]?[grantee.id]?.mayLocate ?? false }
            if let permission, (permission == .locate) != had {
                offset = try appendAndApply(
                    .sharePermissionChanged(
                        SharePermissionChanged(
                            deviceID: deviceID, granteeUserID: grantee.id, locate: permission == .locate)),
                    receivedAtMicros: now)
            }
            return offset
        }
        StructuredLog.info(
            "share_granted",
            [
                "device_id": .int(Int64(deviceID)), "grantee_id": .int(Int64(grantee.id)),
                "permission": .string(permission?.rawValue ?? "unchanged"),
            ])
        return (grantee, offset)
    }

    func revokeShare(_ request: HTTPRequest, _ caller: GateCaller) throws(APIError) -> HTTPResponse {
        let offset = try unshareDevice(caller.deviceID, fromUser: request.pathParameters["user"] ?? "")
        return .json("{\"offset\": \(offset)}")
    }

    /// Ends the share of `deviceID` with user `name` at once (the caller has checked ownership);
    /// 404 `share_not_found` when there is none.
    public func unshareDevice(_ deviceID: UInt64, fromUser name: String) throws(APIError) -> UInt64 {
        let grantee = try existingUser(name)
        guard store.registry.read({ $0.registry.shares[deviceID]?[grantee.id] }) != nil else {
            throw APIError(
                status: 404, code: .shareNotFound,
                message: "this device is not shared with '\(grantee.name)'")
        }
        let offset = try store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(
                .shareRevoked(ShareRevoked(deviceID: deviceID, granteeUserID: grantee.id)),
                receivedAtMicros: clockMicros())
        }
        StructuredLog.info(
            "share_revoked", ["device_id": .int(Int64(deviceID)), "grantee_id": .int(Int64(grantee.id))])
        return offset
    }

    /// A share of a device as its owner sees it listed.
    public struct ShareListing: Sendable {
        public var user: String
        public var untilMicros: Int64?
        /// False once `untilMicros` has passed; an expired share is listed until revoked.
        public var active: Bool
        /// The grantee may also send commands.
        public var mayLocate: Bool = false
    }

    /// The shares of `deviceID` by grantee id, at the server's clock.
    public func shares(of deviceID: UInt64) -> [ShareListing] {
        let now = clockMicros()
        let registry = registrySnapshot
        return (registry.shares[deviceID] ?? [:]).values.sorted(by: { $0.granteeUserID < $1.granteeUserID })
            .map {
                ShareListing(
                    user: registry.users[$0.granteeUserID]?.name ?? "", untilMicros: $0.untilMicros,
                    active: $0.isActive(atMicros: now), mayLocate: $0.mayLocate)
            }
    }

    func listShares(_ caller: GateCaller) -> HTTPResponse {
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("shares")
        writer.beginArray()
        for share in shares(of: caller.deviceID) {
            writer.beginObject()
            writer.key("user")
            writer.string(share.user)
            writer.key("until")
            if let until = share.untilMicros {
                writer.string(RFC3339.formatMicros(until))
            } else {
                writer.null()
            }
            writer.key("active")
            writer.bool(share.active)
            writer.key("permission")
            writer.string(share.mayLocate ? "locate" : "see")
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }
}

/// What a share lets its grantee do (docs/api.md, sharing).
public enum SharePermission: String, Sendable {
    /// Read the device's positions: every share's default.
    case see
    /// Also send it commands: locate, sound, lost, found (docs/commands.md).
    case locate
}
