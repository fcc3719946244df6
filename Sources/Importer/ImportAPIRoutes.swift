import Events
import HTTP
import Identity
import Import
import JSON

#if canImport(Glibc)
    import Glibc
#endif

/// The network API's import routes (docs/api.md, "Imports"), the device's owner only:
/// - `POST /api/find-my/devices/{id}/imports?name=FILE&format=F&dry_run=1`: the body is the file,
///   streamed to `directory` as it arrives (never held in memory; over `bytesMax`: 413), then
///   imported into the device: `202 {"import_id", "device_id"}`. The gate runs before any byte of
///   the body is read, so a caller who may not import sends nothing to disk;
/// - `GET /api/find-my/devices/{id}/imports/{import_id}?wait_ms=N`: the import's status.
extension ImportJobs {
    /// A long poll over the network waits at most this long: each holds one of the server's
    /// blocking handler threads (as a read's `after_offset` does, for as long).
    public static let networkStatusWaitMillisMax = 5_000

    /// The routes; uploads go to `uploadDirectory` (the service's start made it).
    public func addRoutes(to router: inout GuardedRouter, uploadBytesMax: Int64) {
        guard let uploadDirectory else {
            preconditionFailure("an importer serving uploads has an upload directory")
        }
        router.addUpload(
            "POST", "/api/find-my/devices/{id}/imports", directory: uploadDirectory, bytesMax: uploadBytesMax
        ) { [self] request, caller in
            respond { () throws(APIError) in
                try startFromUpload(request, caller: caller, directory: uploadDirectory)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/imports/{import_id}") { [self] request, caller in
            respond { () throws(APIError) in
                let status = try statusAnswer(
                    request, idParameter: "import_id", waitMillisMax: Self.networkStatusWaitMillisMax)
                // Another device's import answers as one that does not exist.
                guard status.deviceID == caller.deviceID else {
                    throw Self.importNotFound(UUID128(request.pathParameters["import_id"] ?? "") ?? .zero)
                }
                return .json(status.jsonBytes)
            }
        }
    }

    private func startFromUpload(_ request: HTTPRequest, caller: GateCaller, directory: String)
        throws(APIError) -> HTTPResponse
    {
        for item in request.queryItems where !["name", "format", "dry_run"].contains(item.name) {
            throw APIError(
                status: 400, code: .unknownParameter,
                message:
                    "unknown query parameter '\(item.name.prefix(40))': this route takes name, format and dry_run"
            )
        }
        guard let body = request.bodyFile else {
            preconditionFailure("an upload route's handler runs with its body file")
        }
        let fileName = String((request.query("name") ?? "upload").split(separator: "/").last ?? "upload")
        let format = try Self.format(request.query("format"))
        let dryRun: Bool
        switch request.query("dry_run") ?? "0" {
        case "1", "true": dryRun = true
        case "0", "false": dryRun = false
        case let other:
            throw .badRequest(.invalidField, "dry_run is 1 or 0 (true or false), got '\(other.prefix(20))'")
        }
        // The upload is removed once the handler returns unless it is renamed: the import keeps it
        // under a name of its own and removes it when it ends.
        let kept = directory + "/import-" + UUID128.random().description
        guard rename(body.path, kept) == 0 else {
            throw APIError(
                status: 503, code: .logUnavailable,
                message:
                    "the upload could not be kept for the import (\(String(cString: strerror(errno)))); send it again"
            )
        }
        let id: UUID128
        do {
            id = try start(
                ImportRequest(
                    deviceID: caller.deviceID, userID: caller.userID, path: kept, fileName: fileName,
                    format: format,
                    dryRun: dryRun, ownsFile: true))
        } catch {
            unlink(kept)
            throw error
        }
        var writer = JSONWriter(capacity: 96)
        writer.beginObject()
        writer.key("import_id")
        writer.string(id.description)
        writer.key("device_id")
        writer.int64(Int64(caller.deviceID))
        writer.endObject()
        return .json(writer.bytes, status: 202)
    }
}
