import Core
import Events
import HTTP
import Identity
import Ingest

/// The HTTP endpoints of Overland and the OsmAnd protocol (docs/clients.md): each decodes its
/// wire format, hands the fixes to `IngestService.submit`, and answers what its app needs once they
/// are durable. Deferred handlers, as the native report: no thread waits for the fdatasync.
extension ClientsService {
    /// Overland's endpoint, and the path GPSLogger's Overland-format sender appends to its base URL.
    static let overlandPaths = ["/api/find-my/overland", "/api/v1/overland/batches"]
    static let osmandPath = "/api/find-my/osmand"

    func addOverlandRoutes(to router: inout GuardedRouter) {
        let service = ingest
        for path in Self.overlandPaths {
            router.addDeferred("POST", path) { request, caller, reply in
                guard case .device(let deviceID)? = caller.principal else {
                    preconditionFailure("the Overland routes' permission is .appDevice")
                }
                Self.overland(request, deviceID: deviceID, service: service, reply: reply)
            }
        }
    }

    func addOsmAndRoutes(to router: inout GuardedRouter) {
        let service = ingest
        for method in ["GET", "POST"] {
            router.addDeferred(method, Self.osmandPath) { request, caller, reply in
                Self.osmand(request, principal: caller.principal, service: service, reply: reply)
            }
        }
    }

    /// Overland deletes a batch from the phone only on `{"result":"ok"}`, so that is the answer
    /// once it is durable, and for what needs no storing (a resend, a batch without fixes, a paused
    /// device: pause means "do not record me", and an error would only queue everything for later).
    static func overland(_ request: HTTPRequest, deviceID: UInt64, service: IngestService, reply: HTTPReply) {
        let batch: AppBatch
        do {
            batch = try OverlandDecoder.decode(request.body, limits: service.limits)
        } catch {
            return reply(error.response)
        }
        // From the decoded batch, not the body (AppBatch.derivedBatchID says why and what is "the same").
        let report = batch.clientReport(
            deviceID: deviceID, batchID: batch.derivedBatchID(deviceID: deviceID, clientProtocol: .overland),
            clientProtocol: .overland)
        service.submit(report) { outcome in
            reply(answer(outcome) { .json("{\"result\":\"ok\"}") })
        }
    }

    /// The OsmAnd protocol's apps count any 2xx as delivered: an empty 200 once durable. A fix that
    /// cannot be read is answered 200 too, and recorded as a rejection (docs/clients.md: a 4xx would
    /// block the app's queue for good). Only credentials are refused.
    static func osmand(
        _ request: HTTPRequest, principal: Registry.Principal?, service: IngestService, reply: HTTPReply
    ) {
        // One reading of the clock: a fix without a time is dated by it, and it is the received_at.
        let received = service.identity.clockMicros()
        let decoded = OsmAndDecoder.decode(
            request, receivedAtMicros: received, fixesMax: service.limits.batchFixesMax)
        let deviceID: UInt64
        if case .device(let fromCredentials)? = principal {
            deviceID = fromCredentials
        } else {
            guard let token = decoded.token else {
                return reply(
                    APIError(
                        status: 401, code: .missingToken,
                        message:
                            "send the device token as the id parameter (in the query or the form body), or as device_id in the JSON body"
                    ).response)
            }
            do {
                deviceID = try service.identity.appDevice(token: token, userName: nil)
            } catch {
                if error.code == .invalidToken { service.identity.recordAppAuthFailure(request) }
                return reply(error.response)
            }
        }
        if let count = decoded.locationsOverLimit {
            return reply(
                APIError(
                    status: 413, code: .tooManyFixes,
                    message:
                        "\(count) locations in one request; batchFixesMax is \(service.limits.batchFixesMax): lower the app's batch size"
                ).response)
        }
        let report = decoded.batch.clientReport(
            deviceID: deviceID,
            batchID: ClientReport.derivedBatchID(
                deviceID: deviceID, clientProtocol: .osmand, body: content(request)),
            clientProtocol: .osmand, receivedAtMicros: received)
        service.submit(report) { outcome in
            reply(answer(outcome) { HTTPResponse(status: 200) })
        }
    }

    /// What identifies an OsmAnd-protocol request's content: its query (where most of these apps
    /// put everything) and its body. A resend is the same request, byte for byte.
    static func content(_ request: HTTPRequest) -> [UInt8] {
        var bytes: [UInt8] = []
        for item in request.queryItems {
            bytes +=
                Array(item.name.utf8) + [UInt8(ascii: "=")] + Array(item.value.utf8) + [UInt8(ascii: "&")]
        }
        return bytes + [0x0A] + request.body
    }

    static func answer(_ outcome: ClientReportOutcome, success: () -> HTTPResponse) -> HTTPResponse {
        switch outcome {
        case .stored, .duplicate, .empty, .paused:
            return success()
        case .inProgress:
            // As for OwnTracks: every one of these apps retries a 503 later.
            var response = APIError(
                status: 503, code: .batchInProgress,
                message: "the same request is being stored right now; send it again in a second"
            ).response
            response.headers.set("Retry-After", "1")
            return response
        case .failed(let error):
            return error.response
        }
    }
}
