import Events
import HTTP
import Identity
import JSON

/// Limits of a geofence definition (docs/geofences.md, "Limits").
public enum GeofenceLimits {
    /// Smaller circles than this are below what a phone's fix can tell apart: every fix would be
    /// undecided (a fix is inside only when its whole accuracy circle is).
    public static let radiusMetersMin = 10.0
    /// A fence is about a place (home, school, office), not a region of a country.
    public static let radiusMetersMax = 100_000.0
    /// Devices one fence is evaluated for.
    public static let devicesPerGeofenceMax = 100
    /// Fences one user may have at once.
    public static let geofencesPerUserMax = 100
    public static let latitudeDegreesMax = 90.0
    public static let longitudeDegreesMax = 180.0
}

/// The geofence definitions (docs/geofences.md): `POST /api/find-my/geofences`, `GET` the
/// caller's list, and `GET`, `PUT`, `DELETE` of one. Each change is one event (type 36 or 37)
/// applied to the registry before the answer, so the next request sees it; the geofence projection
/// folds the same events into its transitions. A fence is its owner's alone: anyone else gets the
/// same 404 as for a fence that does not exist, and a fence may name only devices its owner can see.
extension IdentityService {
    public static let geofenceNotFound = APIError(
        status: 404, code: .geofenceNotFound,
        message: "no geofence with this id among yours; list them with GET /api/find-my/geofences")

    /// Adds the definitions' routes (the fence's notifications and deliveries are
    /// `GeofenceAlertRoutes`').
    public func addGeofenceRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/api/find-my/geofences") { [self] request, caller in
            respond { () throws(APIError) in
                let (id, offset) = try defineGeofence(nil, request.body, owner: caller.userID)
                var writer = JSONWriter(capacity: 64)
                writer.beginObject()
                writer.key("geofence_id")
                writer.int64(Int64(id))
                writer.key("offset")
                writer.int64(Int64(offset))
                writer.endObject()
                return .json(writer.bytes, status: 201)
            }
        }
        router.add("GET", "/api/find-my/geofences") { [self] _, caller in
            let fences = store.registry.read { $0.registry.geofences.fences(ownedBy: caller.userID) }
            var writer = JSONWriter(capacity: 256)
            writer.beginObject()
            writer.key("geofences")
            writer.beginArray()
            for fence in fences { Self.write(fence, &writer) }
            writer.endArray()
            writer.endObject()
            return .json(writer.bytes)
        }
        router.add("GET", "/api/find-my/geofences/{id}") { [self] request, caller in
            respond { () throws(APIError) in
                let fence = try ownedGeofence(request, caller)
                var writer = JSONWriter(capacity: 256)
                Self.write(fence, &writer)
                return .json(writer.bytes)
            }
        }
        router.add("PUT", "/api/find-my/geofences/{id}") { [self] request, caller in
            respond { () throws(APIError) in
                let fence = try ownedGeofence(request, caller)
                let (_, offset) = try defineGeofence(fence.geofenceID, request.body, owner: caller.userID)
                var writer = JSONWriter(capacity: 256)
                Self.write(try ownedGeofence(request, caller), &writer, offset: offset)
                return .json(writer.bytes)
            }
        }
        router.add("DELETE", "/api/find-my/geofences/{id}") { [self] request, caller in
            respond { () throws(APIError) in
                let offset = try store.mutations.withLock { _ throws(APIError) -> UInt64 in
                    let fence = try ownedGeofence(request, caller)
                    return try appendAndApply(
                        .geofenceDeleted(
                            GeofenceDeleted(geofenceID: fence.geofenceID, ownerUserID: caller.userID)),
                        receivedAtMicros: clockMicros())
                }
                var writer = JSONWriter(capacity: 32)
                writer.beginObject()
                writer.key("offset")
                writer.int64(Int64(offset))
                writer.endObject()
                return .json(writer.bytes)
            }
        }
    }

    /// The fence in path parameter `id` if the caller owns it; the same 404 otherwise.
    public func ownedGeofence(_ request: HTTPRequest, _ caller: GateCaller) throws(APIError)
        -> GeofenceDefined
    {
        guard let id = request.pathParameters["id"].flatMap({ UInt64($0) }),
            let fence = store.registry.read({ $0.registry.geofences.fences[id] }),
            fence.ownerUserID == caller.userID
        else { throw Self.geofenceNotFound }
        return fence
    }

    /// Checks a definition and appends it: a new fence when `id` is nil, else a full replacement.
    /// Returns the fence's id and the event's offset.
    func defineGeofence(_ id: UInt64?, _ body: [UInt8], owner: UInt64) throws(APIError) -> (UInt64, UInt64) {
        let object = try parseObject(
            body, allowed: ["name", "latitude", "longitude", "radius_m", "device_ids"])
        let name = try field { () throws(JSONAccessError) in try object.string("name") }
        try checkText(name, field: "name", allowEmpty: false)
        let latitude = try field { () throws(JSONAccessError) in try object.double("latitude") }
        let longitude = try field { () throws(JSONAccessError) in try object.double("longitude") }
        let radius = try field { () throws(JSONAccessError) in try object.double("radius_m") }
        let devices = try field { () throws(JSONAccessError) in
            try object.decode("device_ids") { value throws(JSONAccessError) in
                try value.mapArray { element throws(JSONAccessError) in try element.int64Value }
            }
        }
        guard abs(latitude) <= GeofenceLimits.latitudeDegreesMax else {
            throw .badRequest(.outOfRange, "latitude must be between -90 and 90 degrees, got \(latitude)")
        }
        guard abs(longitude) <= GeofenceLimits.longitudeDegreesMax else {
            throw .badRequest(.outOfRange, "longitude must be between -180 and 180 degrees, got \(longitude)")
        }
        guard radius >= GeofenceLimits.radiusMetersMin, radius <= GeofenceLimits.radiusMetersMax else {
            throw .badRequest(
                .outOfRange,
                "radius_m must be between \(Int(GeofenceLimits.radiusMetersMin)) and "
                    + "\(Int(GeofenceLimits.radiusMetersMax)) metres, got \(radius)")
        }
        guard !devices.isEmpty, devices.count <= GeofenceLimits.devicesPerGeofenceMax else {
            throw .badRequest(
                .invalidField,
                "device_ids must name 1 to \(GeofenceLimits.devicesPerGeofenceMax) devices, got \(devices.count)"
            )
        }
        let deviceIDs = Array(Set(devices.map { UInt64(bitPattern: $0) })).sorted()
        for device in deviceIDs where visibility(of: device, to: owner) == nil {
            throw APIError(
                status: 400, code: .deviceNotFound,
                message: "device_ids names \(Int64(bitPattern: device)), which is not among the devices you "
                    + "can see; list yours with GET /api/find-my/devices")
        }
        return try store.mutations.withLock { _ throws(APIError) -> (UInt64, UInt64) in
            let (book, owned) = store.registry.read {
                ($0.registry.geofences, $0.registry.geofences.fences(ownedBy: owner).count)
            }
            if let id {
                guard book.fences[id]?.ownerUserID == owner else { throw Self.geofenceNotFound }
            } else if owned >= GeofenceLimits.geofencesPerUserMax {
                throw APIError(
                    status: 409, code: .tooManyGeofences,
                    message: "you have \(owned) geofences, the most there may be; delete one first")
            }
            let fenceID = id ?? book.nextID
            let offset = try appendAndApply(
                .geofenceDefined(
                    GeofenceDefined(
                        geofenceID: fenceID, ownerUserID: owner, name: name, latitude: latitude,
                        longitude: longitude, radiusMeters: radius, deviceIDs: deviceIDs)),
                receivedAtMicros: clockMicros())
            return (fenceID, offset)
        }
    }

    static func write(_ fence: GeofenceDefined, _ writer: inout JSONWriter, offset: UInt64? = nil) {
        writer.beginObject()
        writer.key("geofence_id")
        writer.int64(Int64(bitPattern: fence.geofenceID))
        writer.key("name")
        writer.string(fence.name)
        writer.key("latitude")
        writer.finiteDouble(fence.latitude)
        writer.key("longitude")
        writer.finiteDouble(fence.longitude)
        writer.key("radius_m")
        writer.finiteDouble(fence.radiusMeters)
        writer.key("device_ids")
        writer.beginArray()
        for id in fence.deviceIDs { writer.int64(Int64(bitPattern: id)) }
        writer.endArray()
        if let offset {
            writer.key("offset")
            writer.int64(Int64(offset))
        }
        writer.endObject()
    }
}
