import HTTP
import Threads

extension GuardedRouter {
    /// An upload route (`Router.addUpload`): the body is streamed to a file in `directory`, at most
    /// `bytesMax` bytes. The gate runs in `admit`, once the head is in and before any byte of the
    /// body is read, so a caller who may not call the route sends nothing to disk (a refusal is
    /// answered without reading the body). The caller it resolved reaches the handler without a
    /// second lookup (`AdmittedCallers`); the handler gets it as `add`'s does.
    public mutating func addUpload(
        _ method: String, _ pattern: String, directory: String, bytesMax: Int64, _ handler: @escaping Handler
    ) {
        guard let permission = permission(method, pattern) else { return }
        precondition(permission != .page, "a page's refusal is a redirect; serve pages with add")
        let checksCSRF = Self.checksCSRF(method, pattern)
        let admitted = AdmittedCallers()
        let admit: @Sendable (HTTPRequest) -> HTTPResponse? = { [service] request in
            switch service.pass(request, permission, checksCSRF: checksCSRF) {
            case .passed(let caller):
                admitted.put(caller, for: request)
                return nil
            case .refused(let refusal):
                return refusal
            }
        }
        router.addUpload(method, pattern, directory: directory, bytesMax: bytesMax, admit: admit) {
            [service] request in
            if let caller = admitted.take(for: request) { return handler(request, caller) }
            // Forgotten (more uploads admitted meanwhile than are kept): the gate once more.
            switch service.pass(request, permission, checksCSRF: checksCSRF) {
            case .passed(let caller): return handler(request, caller)
            case .refused(let refusal): return refusal
            }
        }
    }
}

/// The callers an upload route's gate admitted, until their handlers run: by connection, since a
/// connection's requests come one after another (the handler of one runs before the head of the
/// next is read), and only to the request with the same path and credentials (`Router.respond`
/// gives every in-process request connection 0). An upload whose body never arrives whole (too
/// large, the client gone) leaves its entry behind: at most `entriesMax` are kept, the oldest
/// forgotten first.
final class AdmittedCallers: Sendable {
    static let entriesMax = 1024

    private struct Entry {
        var caller: GateCaller
        var key: [String?]
        var order: UInt64
    }
    private let entries = Locked<(byConnection: [UInt64: Entry], next: UInt64)>(([:], 0))

    private static func key(_ request: HTTPRequest) -> [String?] {
        [request.method, request.path, request.headers["Authorization"], request.headers["Cookie"]]
    }

    func put(_ caller: GateCaller, for request: HTTPRequest) {
        entries.withLock { state in
            state.next += 1
            state.byConnection[request.connectionID] = Entry(
                caller: caller, key: Self.key(request), order: state.next)
            guard state.byConnection.count > Self.entriesMax,
                let oldest = state.byConnection.min(by: { $0.value.order < $1.value.order })?.key
            else { return }
            state.byConnection[oldest] = nil
        }
    }

    func take(for request: HTTPRequest) -> GateCaller? {
        entries.withLock { state in
            guard let entry = state.byConnection.removeValue(forKey: request.connectionID),
                entry.key == Self.key(request)
            else { return nil }
            return entry.caller
        }
    }
}
