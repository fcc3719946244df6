import Events
import JSON

/// How `findmy log dump` shows a record: JSON (one object per record) or one human line. Also the
/// report body a phone would send for a batch, which `findmy-bench log` weighs against the log.
public enum EventJSON {
    public static func typeName(_ type: UInt8) -> String {
        EventType(rawValue: type)?.name ?? "unknown_\(type)"
    }

    public static func write(_ header: RecordHeader, _ event: Event, to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("offset")
        writer.int64(Int64(header.offset))
        writer.key("type")
        writer.string(typeName(header.type))
        writer.key("received_at")
        writer.string(time(header.receivedAtMicros))
        switch event {
        case .fixBatch(let batch):
            writer.key("device")
            writer.int64(Int64(bitPattern: batch.deviceID))
            writer.key("batch_id")
            writer.string(batch.batchID.description)
            writer.key("protocol")
            writer.string(batch.clientProtocol.name)
            writer.key("fixes")
            writer.beginArray()
            for fix in batch.fixes { write(fix, to: &writer) }
            writer.endArray()
            writer.key("rejected")
            writer.rejectedFixes(batch.rejections.lazy.map { ($0.index, $0.reason) })
        case .userCreated, .userTokenIssued, .userPasswordSet, .userRoleChanged, .userTokenRotated,
            .userSettingChanged:
            writeUser(event, to: &writer)
        case .deviceEnrolled, .deviceTokenIssued, .deviceTokenRevoked, .deviceRemoved, .pushTokenRegistered,
            .pushTokenInvalidated:
            writeDevice(event, to: &writer)
        case .reportingChanged, .retentionChanged, .historyErased, .shareGranted, .shareRevoked:
            writePrivacy(event, to: &writer)
        case .geofenceDefined, .geofenceDeleted, .geofenceNotificationsSet:
            writeGeofence(event, to: &writer)
        case .regionTransition, .waypointsReported:
            writeRegionReport(event, to: &writer)
        case .devicePresenceLinked, .presenceChanged:
            writePresence(event, to: &writer)
        case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired,
            .sharePermissionChanged:
            writeCommand(event, to: &writer)
        case .historyImported(let imported):
            writeHistoryImported(imported, to: &writer)
        case .deviceNtfySet(let set):
            writer.key("device")
            writer.int64(Int64(bitPattern: set.deviceID))
            writer.key("topic_url")
            writer.string(set.topicURL)
        case .foundNoticeSet(let set):
            writer.key("device")
            writer.int64(Int64(bitPattern: set.deviceID))
            writer.key("user")
            writer.int64(Int64(bitPattern: set.userID))
            writer.key("armed")
            writer.bool(set.armed)
        case .unknown(_, let version, let payload):
            writer.key("event_version")
            writer.int64(Int64(version))
            writer.key("payload_bytes")
            writer.int64(Int64(payload.count))
        }
        writer.endObject()
    }

    public static func write(_ fix: Fix, to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("latitude")
        finite(fix.latitude, &writer)
        writer.key("longitude")
        finite(fix.longitude, &writer)
        writer.key("accuracy_m")
        if let accuracy = fix.accuracyMeters { finite(accuracy, &writer) } else { writer.null() }
        if let altitude = fix.altitudeMeters {
            writer.key("altitude_m")
            finite(altitude, &writer)
        }
        if let speed = fix.speedMetersPerSecond {
            writer.key("speed_mps")
            finite(speed, &writer)
        }
        if let heading = fix.headingDegrees {
            writer.key("heading_deg")
            finite(heading, &writer)
        }
        if let battery = fix.batteryPercent {
            writer.key("battery_pct")
            writer.int64(Int64(battery))
        }
        if let charging = fix.isCharging {
            writer.key("is_charging")
            writer.bool(charging)
        }
        writer.key("source")
        writer.string(fix.source)
        writer.key("recorded_at")
        writer.string(time(fix.recordedAtMicros))
        if fix.clockSuspect {
            writer.key("clock_suspect")
            writer.bool(true)
        }
        writer.endObject()
    }

    /// A time of the log as RFC 3339, or, outside the years RFC 3339 text is written for (where
    /// formatting traps; only a hand-made or damaged log holds such a time), its microseconds since
    /// 1970 as they are: a dump shows what the log holds and never stops on it.
    public static func time(_ micros: Int64, millis: Bool = false) -> String {
        guard micros == RFC3339.clampedMicros(micros) else { return "\(micros) µs since 1970" }
        return millis ? RFC3339.formatMillis(micros) : RFC3339.formatMicros(micros)
    }

    /// The log keeps doubles bit for bit; JSON has no NaN or infinity, so those print as strings.
    static func finite(_ value: Double, _ writer: inout JSONWriter) {
        if value.isFinite { writer.double(value) } else { writer.string(value.description) }
    }

    public static func line(_ header: RecordHeader, _ event: Event) -> String {
        let prefix =
            "\(header.offset)  \(time(header.receivedAtMicros, millis: true))  \(typeName(header.type))"
        switch event {
        case .fixBatch(let batch):
            return prefix + "  device \(batch.deviceID)  batch \(batch.batchID)  \(batch.fixes.count) fixes"
                + (batch.clientProtocol == .native ? "" : "  via \(batch.clientProtocol.name)")
                + (batch.rejections.isEmpty ? "" : ", \(batch.rejections.count) rejected")
        case .userCreated(let user):
            return prefix + "  user \(user.userID) '\(user.name)' \(user.role == .admin ? "admin" : "member")"
        case .userTokenIssued(let issued): return prefix + "  user \(issued.userID)"
        case .deviceEnrolled(let device):
            return prefix
                + "  device \(device.deviceID) of user \(device.userID) '\(device.name)' \(device.platform) \(device.deviceUUID)"
        case .deviceTokenIssued(let issued): return prefix + "  device \(issued.deviceID)"
        case .deviceTokenRevoked(let revoked): return prefix + "  device \(revoked.deviceID)"
        case .pushTokenRegistered(let push): return prefix + "  device \(push.deviceID) \(push.provider)"
        case .pushTokenInvalidated(let push): return prefix + "  \(push.provider): \(push.reason)"
        case .reportingChanged(let change):
            return prefix + "  device \(change.deviceID) " + (change.paused ? "paused" : "resumed")
        case .retentionChanged(let change):
            let whom =
                switch change.scope {
                case .device(let id): "device \(id)"
                case .user(let id): "user \(id)"
                }
            return prefix + "  \(whom) " + (change.days.map { "\($0) days" } ?? "cleared")
        case .historyErased(let erase):
            return prefix + "  device \(erase.deviceID) from "
                + (erase.fromMicros.map { time($0, millis: true) } ?? "the start") + " to "
                + (erase.toMicros.map { time($0, millis: true) } ?? "the end")
        case .deviceRemoved(let removed): return prefix + "  device \(removed.deviceID)"
        case .userPasswordSet(let set): return prefix + "  user \(set.userID)"
        case .userRoleChanged(let change):
            return prefix + "  user \(change.userID) \(change.role == .admin ? "admin" : "member")"
        case .shareGranted(let share):
            return prefix + "  device \(share.deviceID) to user \(share.granteeUserID)"
                + (share.untilMicros.map { " until " + time($0) } ?? "")
        case .shareRevoked(let share):
            return prefix + "  device \(share.deviceID) from user \(share.granteeUserID)"
        case .userTokenRotated(let rotated): return prefix + "  user \(rotated.userID)"
        case .userSettingChanged(let changed):
            return prefix + "  user \(changed.userID)  \(changed.name) = \(changed.value)"
        case .devicePresenceLinked, .presenceChanged:
            return prefix + "  " + presenceLine(event)
        case .geofenceDefined(let fence):
            return prefix + "  geofence \(fence.geofenceID) of user \(fence.ownerUserID) '\(fence.name)' "
                + "\(fence.radiusMeters) m, \(fence.deviceIDs.count) devices"
        case .geofenceDeleted(let deleted):
            return prefix + "  geofence \(deleted.geofenceID) of user \(deleted.ownerUserID)"
        case .geofenceNotificationsSet(let set):
            return prefix
                + "  geofence \(set.geofenceID) of user \(set.ownerUserID)  webhook '\(set.webhookURL)' "
                + "ntfy '\(set.ntfyURL)'"
        case .regionTransition(let transition):
            return prefix
                + "  device \(transition.deviceID)  \(transition.kind == .enter ? "enter" : "leave") "
                + "'\(transition.regionName)'"
        case .waypointsReported(let reported):
            return prefix + "  device \(reported.deviceID)  \(reported.waypoints.count) waypoints"
                + (reported.complete ? " (whole list)" : "")
        case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired,
            .sharePermissionChanged:
            return prefix + "  " + commandLine(event)
        case .historyImported(let imported):
            return prefix + "  device \(imported.deviceID)  import \(imported.importID)  \(imported.format) "
                + "'\(imported.fileName)'  \(imported.fixesAccepted) of \(imported.fixesRead) fixes stored, "
                + "\(imported.batchIDs.count) batches"
        case .deviceNtfySet(let set):
            return prefix + "  device \(set.deviceID)  ntfy '\(set.topicURL)'"
        case .foundNoticeSet(let set):
            return prefix
                + "  device \(set.deviceID) of user \(set.userID)  \(set.armed ? "armed" : "disarmed")"
        case .unknown(_, let version, _):
            return prefix + "  (version \(version), not understood by this findmy)"
        }
    }
}

// MARK: users (accounts, their tokens, roles and settings)

extension EventJSON {
    private static func writeUser(_ event: Event, to writer: inout JSONWriter) {
        switch event {
        case .userCreated(let user):
            writer.key("user")
            writer.int64(Int64(bitPattern: user.userID))
            writer.key("name")
            writer.string(user.name)
            writer.key("role")
            writer.string(user.role == .admin ? "admin" : "member")
        case .userTokenIssued(let issued):
            writer.key("user")
            writer.int64(Int64(bitPattern: issued.userID))
        case .userPasswordSet(let set):
            // The hash, not the password; still not printed: a dump is shared in bug reports.
            writer.key("user")
            writer.int64(Int64(bitPattern: set.userID))
        case .userRoleChanged(let change):
            writer.key("user")
            writer.int64(Int64(bitPattern: change.userID))
            writer.key("role")
            writer.string(change.role == .admin ? "admin" : "member")
        case .userTokenRotated(let rotated):
            // Not even the hash: a dump is shared in bug reports.
            writer.key("user")
            writer.int64(Int64(bitPattern: rotated.userID))
        case .userSettingChanged(let changed):
            writer.key("user")
            writer.int64(Int64(bitPattern: changed.userID))
            writer.key("setting")
            writer.string(changed.name)
            writer.key("value")
            writer.string(changed.value)
        default:
            preconditionFailure("not a user event")
        }
    }
}

// MARK: devices (enrolment, tokens, push addresses, removal)

extension EventJSON {
    private static func writeDevice(_ event: Event, to writer: inout JSONWriter) {
        switch event {
        case .deviceEnrolled(let device):
            writer.key("device")
            writer.int64(Int64(bitPattern: device.deviceID))
            writer.key("user")
            writer.int64(Int64(bitPattern: device.userID))
            writer.key("device_uuid")
            writer.string(device.deviceUUID.description)
            writer.key("name")
            writer.string(device.name)
            writer.key("platform")
            writer.string(device.platform)
            writer.key("model")
            writer.string(device.model)
        case .deviceTokenIssued(let issued):
            writer.key("device")
            writer.int64(Int64(bitPattern: issued.deviceID))
        case .deviceTokenRevoked(let revoked):
            writer.key("device")
            writer.int64(Int64(bitPattern: revoked.deviceID))
        case .deviceRemoved(let removed):
            writer.key("device")
            writer.int64(Int64(bitPattern: removed.deviceID))
        case .pushTokenRegistered(let push):
            writer.key("device")
            writer.int64(Int64(bitPattern: push.deviceID))
            writer.key("provider")
            writer.string(push.provider)
            writer.key("topic")
            writer.string(push.topic)
            writer.key("environment")
            writer.string(push.environment)
            writer.key("web_push_keys")
            writer.bool(!push.webPushPublicKey.isEmpty)
        case .pushTokenInvalidated(let push):
            writer.key("provider")
            writer.string(push.provider)
            writer.key("reason")
            writer.string(push.reason)
        default:
            preconditionFailure("not a device event")
        }
    }
}

// MARK: a device's privacy (reporting, retention, erasure, shares)

extension EventJSON {
    private static func writePrivacy(_ event: Event, to writer: inout JSONWriter) {
        switch event {
        case .reportingChanged(let change):
            writer.key("device")
            writer.int64(Int64(bitPattern: change.deviceID))
            writer.key("paused")
            writer.bool(change.paused)
        case .retentionChanged(let change):
            switch change.scope {
            case .device(let id):
                writer.key("device")
                writer.int64(Int64(bitPattern: id))
            case .user(let id):
                writer.key("user")
                writer.int64(Int64(bitPattern: id))
            }
            writer.key("days")
            if let days = change.days { writer.int64(Int64(days)) } else { writer.null() }
        case .historyErased(let erase):
            writer.key("device")
            writer.int64(Int64(bitPattern: erase.deviceID))
            writer.key("from")
            if let from = erase.fromMicros {
                writer.string(time(from))
            } else {
                writer.null()
            }
            writer.key("to")
            if let to = erase.toMicros { writer.string(time(to)) } else { writer.null() }
        case .shareGranted(let share):
            writer.key("device")
            writer.int64(Int64(bitPattern: share.deviceID))
            writer.key("grantee")
            writer.int64(Int64(bitPattern: share.granteeUserID))
            writer.key("until")
            if let until = share.untilMicros {
                writer.string(time(until))
            } else {
                writer.null()
            }
        case .shareRevoked(let share):
            writer.key("device")
            writer.int64(Int64(bitPattern: share.deviceID))
            writer.key("grantee")
            writer.int64(Int64(bitPattern: share.granteeUserID))
        default:
            preconditionFailure("not a privacy event")
        }
    }
}

// MARK: geofences

extension EventJSON {
    private static func writeGeofence(_ event: Event, to writer: inout JSONWriter) {
        switch event {
        case .geofenceDefined(let fence):
            writer.key("geofence")
            writer.int64(Int64(bitPattern: fence.geofenceID))
            writer.key("owner")
            writer.int64(Int64(bitPattern: fence.ownerUserID))
            writer.key("name")
            writer.string(fence.name)
            writer.key("latitude")
            writer.finiteDouble(fence.latitude)
            writer.key("longitude")
            writer.finiteDouble(fence.longitude)
            writer.key("radius_m")
            writer.finiteDouble(fence.radiusMeters)
            writer.key("devices")
            writer.beginArray()
            for id in fence.deviceIDs { writer.int64(Int64(bitPattern: id)) }
            writer.endArray()
        case .geofenceDeleted(let deleted):
            writer.key("geofence")
            writer.int64(Int64(bitPattern: deleted.geofenceID))
            writer.key("owner")
            writer.int64(Int64(bitPattern: deleted.ownerUserID))
        case .geofenceNotificationsSet(let set):
            writer.key("geofence")
            writer.int64(Int64(bitPattern: set.geofenceID))
            writer.key("owner")
            writer.int64(Int64(bitPattern: set.ownerUserID))
            writer.key("webhook_url")
            writer.string(set.webhookURL)
            writer.key("ntfy_url")
            writer.string(set.ntfyURL)
        default:
            preconditionFailure("not a geofence event")
        }
    }
}

// MARK: regions a phone reports (OwnTracks transitions and waypoints)

extension EventJSON {
    private static func writeRegionReport(_ event: Event, to writer: inout JSONWriter) {
        switch event {
        case .regionTransition(let transition):
            writer.key("device")
            writer.int64(Int64(bitPattern: transition.deviceID))
            writer.key("protocol")
            writer.string(transition.clientProtocol.name)
            writer.key("event")
            writer.string(transition.kind == .enter ? "enter" : "leave")
            writer.key("recorded_at")
            writer.string(time(transition.recordedAtMicros))
            writer.key("region_id")
            writer.string(transition.regionID)
            writer.key("region")
            writer.string(transition.regionName)
            writer.key("trigger")
            writer.string(transition.trigger)
        case .waypointsReported(let reported):
            writer.key("device")
            writer.int64(Int64(bitPattern: reported.deviceID))
            writer.key("protocol")
            writer.string(reported.clientProtocol.name)
            writer.key("complete")
            writer.bool(reported.complete)
            writer.key("waypoints")
            writer.beginArray()
            for waypoint in reported.waypoints {
                writer.beginObject()
                writer.key("region_id")
                writer.string(waypoint.regionID)
                writer.key("name")
                writer.string(waypoint.name)
                writer.key("latitude")
                finite(waypoint.latitude, &writer)
                writer.key("longitude")
                finite(waypoint.longitude, &writer)
                writer.key("radius_m")
                finite(waypoint.radiusMeters, &writer)
                writer.endObject()
            }
            writer.endArray()
        default:
            preconditionFailure("not a region event")
        }
    }
}

// MARK: commands (docs/log-format.md types 27-32)

extension EventJSON {
    static func writeCommand(_ event: Event, to writer: inout JSONWriter) {
        func common(_ id: UUID128, _ device: UInt64) {
            writer.key("command_id")
            writer.string(id.description)
            writer.key("device")
            writer.int64(Int64(bitPattern: device))
        }
        switch event {
        case .commandRequested(let c):
            common(c.commandID, c.deviceID)
            writer.key("kind")
            writer.string(c.kind.name)
            writer.key("message")
            writer.string(c.message)
            writer.key("phone")
            writer.string(c.phone)
            writer.key("requested_by")
            writer.int64(Int64(bitPattern: c.requestedByUserID))
            writer.key("requested_at")
            writer.string(time(c.requestedAtMicros))
        case .commandSent(let c):
            common(c.commandID, c.deviceID)
            writer.key("channel")
            writer.string(c.channel)
            writer.key("provider_id")
            if c.providerID.isEmpty { writer.null() } else { writer.string(c.providerID) }
        case .commandDeliveryFailed(let c):
            common(c.commandID, c.deviceID)
            writer.key("channel")
            writer.string(c.channel)
            writer.key("reason")
            writer.string(c.reason)
            writer.key("retry_at")
            if let retry = c.retryAtMicros { writer.string(time(retry)) } else { writer.null() }
            writer.key("address_dead")
            writer.bool(c.addressDead)
        case .commandAnswered(let c):
            common(c.commandID, c.deviceID)
            writer.key("batch_offset")
            writer.int64(Int64(bitPattern: c.batchOffset))
            writer.key("fix_index")
            writer.int64(Int64(c.fixIndex))
            writer.key("protocol")
            writer.string(c.clientProtocol.name)
        case .commandExpired(let c):
            common(c.commandID, c.deviceID)
            writer.key("reason")
            writer.string(c.reason)
        case .sharePermissionChanged(let c):
            writer.key("device")
            writer.int64(Int64(bitPattern: c.deviceID))
            writer.key("grantee")
            writer.int64(Int64(bitPattern: c.granteeUserID))
            writer.key("permission")
            writer.string(c.locate ? "locate" : "see")
        default:
            preconditionFailure("not a command event")
        }
    }

    static func commandLine(_ event: Event) -> String {
        switch event {
        case .commandRequested(let c):
            "device \(c.deviceID)  \(c.kind.name) \(c.commandID) by user \(c.requestedByUserID)"
        case .commandSent(let c):
            "device \(c.deviceID)  \(c.commandID) sent via \(c.channel)"
                + (c.providerID.isEmpty ? "" : " (\(c.providerID))")
        case .commandDeliveryFailed(let c):
            "device \(c.deviceID)  \(c.commandID) via \(c.channel) failed: \(c.reason)"
                + (c.retryAtMicros.map { ", retry at " + time($0) } ?? "")
                + (c.addressDead ? ", address dead" : "")
        case .commandAnswered(let c):
            "device \(c.deviceID)  \(c.commandID) answered by fix \(c.fixIndex) of record \(c.batchOffset)"
        case .commandExpired(let c):
            "device \(c.deviceID)  \(c.commandID) ended: \(c.reason)"
        case .sharePermissionChanged(let c):
            "device \(c.deviceID) user \(c.granteeUserID): " + (c.locate ? "may locate" : "see only")
        default:
            preconditionFailure("not a command event")
        }
    }
}

// MARK: presence (docs/log-format.md types 34-35)

extension EventJSON {
    static func writePresence(_ event: Event, to writer: inout JSONWriter) {
        switch event {
        case .devicePresenceLinked(let linked):
            writer.key("device")
            writer.int64(Int64(bitPattern: linked.deviceID))
            writer.key("user")
            writer.int64(Int64(bitPattern: linked.userID))
            writer.key("headscale_node_id")
            if linked.isUnlink { writer.null() } else { writer.string(linked.nodeID) }
            writer.key("headscale_node")
            if linked.isUnlink { writer.null() } else { writer.string(linked.nodeName) }
        case .presenceChanged(let changed):
            writer.key("device")
            writer.int64(Int64(bitPattern: changed.deviceID))
            writer.key("headscale_node_id")
            writer.string(changed.nodeID)
            writer.key("online")
            writer.bool(changed.online)
            writer.key("last_seen")
            if let seen = changed.lastSeenMicros { writer.string(time(seen)) } else { writer.null() }
            writer.key("observed_at")
            writer.string(time(changed.observedAtMicros))
        default:
            break
        }
    }

    static func presenceLine(_ event: Event) -> String {
        switch event {
        case .devicePresenceLinked(let linked):
            return linked.isUnlink
                ? "device \(linked.deviceID) unlinked from the tailnet"
                : "device \(linked.deviceID) linked to node \(linked.nodeID) '\(linked.nodeName)'"
        case .presenceChanged(let changed):
            return "device \(changed.deviceID)  node \(changed.nodeID) "
                + (changed.online ? "online" : "offline")
                + (changed.lastSeenMicros.map { ", last seen " + time($0) } ?? "")
        default:
            return ""
        }
    }
}
