import Events
import HTTP
import Identity
import Import
import Ingest
import JSON
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The admin socket's import routes (docs/api.md, "Admin socket"), which `findmy import` calls:
/// - `POST /admin/imports {"user", "device_id" | "new_device", "path", "file_name"?, "format"?,
///   "dry_run"?}`: starts an import of the file at `path` (read by the server itself: the socket
///   is its owner's only) and answers `202 {"import_id", "device_id", "device_created"}`;
///   `new_device` names the user's device to import into, enrolled when the user has none of that
///   name (so that running the same import again goes to the same device);
/// - `GET /admin/imports/{id}?wait_ms=N`: the import's status once it ended or N ms passed.
extension ImportJobs {
    /// A long poll of an import's status waits at most this long.
    public static let statusWaitMillisMax = 60_000
    /// The platform of a device enrolled for an import (a-z, as `enrolDevice` asks).
    public static let importedDevicePlatform = "import"

    public func addAdminRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/admin/imports") { [self] request, _ in
            respond { () throws(APIError) in try startFromAdmin(request) }
        }
        router.add("GET", "/admin/imports/{id}") { [self] request, _ in
            respond { () throws(APIError) in
                .json(try statusAnswer(request).jsonBytes)
            }
        }
    }

    private func startFromAdmin(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        let object = try parseObject(
            request.body,
            allowed: ["user", "device_id", "new_device", "path", "file_name", "format", "dry_run"])
        let userName = try field { () throws(JSONAccessError) in try object.string("user") }
        let path = try field { () throws(JSONAccessError) in try object.string("path") }
        let deviceID = try field { () throws(JSONAccessError) in try object.int64IfPresent("device_id") }
        let newDevice = try field { () throws(JSONAccessError) in try object.stringIfPresent("new_device") }
        let fileName =
            try field { () throws(JSONAccessError) in try object.stringIfPresent("file_name") }
            ?? String(path.split(separator: "/").last ?? "")
        let format = try Self.format(
            try field { () throws(JSONAccessError) in try object.stringIfPresent("format") })
        let dryRun = try field { () throws(JSONAccessError) in try object.boolIfPresent("dry_run") } ?? false
        guard Self.isReadableFile(path) else {
            throw .badRequest(.invalidField, "path: '\(path)' is not a file the server can read")
        }
        let registry = ingest.identity.store.registry
        guard let user = registry.read({ $0.registry.user(named: userName) }) else {
            throw APIError(status: 404, code: .userNotFound, message: "no user named '\(userName)'")
        }
        let device: (id: UInt64, created: Bool)
        switch (deviceID, newDevice) {
        case (let id?, nil):
            guard id > 0, let found = registry.read({ $0.registry.liveDevice(UInt64(id)) }),
                found.userID == user.id
            else {
                throw APIError(
                    status: 404, code: .deviceNotFound, message: "user '\(userName)' has no device \(id)")
            }
            device = (found.id, false)
        case (nil, let name?):
            device = try deviceNamed(name, userID: user.id)
        default:
            throw .badRequest(
                .invalidField, "give exactly one of device_id (a device of the user) and new_device (a name)")
        }
        let id = try start(
            ImportRequest(
                deviceID: device.id, userID: user.id, path: path, fileName: fileName, format: format,
                dryRun: dryRun))
        var writer = JSONWriter(capacity: 128)
        writer.beginObject()
        writer.key("import_id")
        writer.string(id.description)
        writer.key("device_id")
        writer.int64(Int64(device.id))
        writer.key("device_created")
        writer.bool(device.created)
        writer.endObject()
        return .json(writer.bytes, status: 202)
    }

    /// The user's live device named `name` (the lowest id when several are), or a new one.
    func deviceNamed(_ name: String, userID: UInt64) throws(APIError) -> (id: UInt64, created: Bool) {
        let existing = ingest.identity.store.registry.read { state in
            state.registry.devices.values.filter { $0.userID == userID && !$0.removed && $0.name == name }
                .map(\.id).min()
        }
        if let existing { return (existing, false) }
        let enrolled = try ingest.enrolDevice(
            userID: userID, uuid: UUID128.random(), name: name, platform: Self.importedDevicePlatform,
            model: "")
        return (enrolled.deviceID, true)
    }

    /// The status the path's `{id}` names, after the request's `wait_ms` (at most `waitMillisMax`).
    func statusAnswer(
        _ request: HTTPRequest, idParameter: String = "id", waitMillisMax: Int = statusWaitMillisMax
    ) throws(APIError) -> ImportStatus {
        guard let text = request.pathParameters[idParameter], let id = UUID128(text) else {
            throw .badRequest(.invalidField, "the import id is a UUID, as starting the import answered it")
        }
        var waitMillis = 0
        if let wait = request.query("wait_ms") {
            guard let millis = Int(wait), (0...waitMillisMax).contains(millis) else {
                throw .badRequest(
                    .invalidField, "wait_ms is a number of milliseconds from 0 to \(waitMillisMax)")
            }
            waitMillis = millis
        }
        guard let status = status(id, waitMicros: Int64(waitMillis) * 1000) else {
            throw Self.importNotFound(id)
        }
        return status
    }

    static func importNotFound(_ id: UUID128) -> APIError {
        APIError(
            status: 404, code: .importNotFound,
            message:
                "this server started no import \(id) (or it ended long ago, or before a restart); its fixes, "
                + "if it stored any, are in the device's history")
    }

    /// A `format` as the command line and the API spell it; nil: detect it.
    static func format(_ name: String?) throws(APIError) -> ImportFormat? {
        guard let name, !name.isEmpty else { return nil }
        guard let format = ImportFormat(rawValue: name) else {
            throw .badRequest(
                .invalidField,
                "format: '\(name.prefix(40))' is not one of "
                    + ImportFormat.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return format
    }

    static func isReadableFile(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && access(path, R_OK) == 0
    }
}
