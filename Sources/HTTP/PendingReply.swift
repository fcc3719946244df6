import CMicroHTTPD
import Threads

/// The answer to one request whose handler runs off the event loop, and the suspension of its
/// connection meanwhile. Every transition happens under `lock`, and so do MHD_suspend_connection
/// and MHD_resume_connection: once `abandon` has returned, nobody touches the connection again.
///
///     running    --answer-->                 early(response)   the event thread queues it
///     running    --suspendUnlessAnswered-->  suspended         MHD_suspend_connection
///     suspended  --answer-->                 resumed(response) MHD_resume_connection
///     running    --abandon-->                abandoned(503)    the event thread queues it
///     suspended  --abandon-->                abandoned(503)    MHD_resume_connection
///     early, abandoned  --suspendUnlessAnswered-->  taken   the answer handed to the event thread
///     resumed, abandoned  --takeAnswer-->              taken
///     early, resumed, abandoned, taken: answer and abandon change nothing
///
/// `taken` holds no answer: once queued, a large answer's array has MHD's reference alone, so that
/// it goes back to the pool unshared when sent (`HeldBody`, `KeptBuffers`), whoever still holds
/// this object (a worker's last job).
final class PendingReply: @unchecked Sendable {
    let routeName: String
    private let connection: OpaquePointer
    private let lock = ConditionLock()
    private var state = State.running  // guarded by `lock`

    private enum State {
        case running
        case early(HTTPResponse)
        case suspended
        case resumed(HTTPResponse)
        case abandoned(HTTPResponse)
        case taken
    }

    init(connection: OpaquePointer, routeName: String) {
        self.connection = connection
        self.routeName = routeName
    }

    /// From any thread, once; later answers are ignored.
    func answer(_ response: HTTPResponse) {
        lock.withLock {
            switch state {
            case .running:
                state = .early(response)
            case .suspended:
                state = .resumed(response)
                MHD_resume_connection(connection)
            case .early, .resumed, .abandoned, .taken:
                break
            }
        }
    }

    /// On the event thread, from the access handler: the answer if there is one already,
    /// otherwise suspends the connection (until `answer` or `abandon` resumes it) and returns nil.
    func suspendUnlessAnswered() -> HTTPResponse? {
        lock.withLock {
            switch state {
            case .running:
                state = .suspended
                MHD_suspend_connection(connection)
                return nil
            case .early(let response), .abandoned(let response):
                state = .taken
                return response
            case .suspended, .resumed, .taken:
                preconditionFailure("a request is suspended once")
            }
        }
    }

    /// On the event thread, after the resume.
    func takeAnswer() -> HTTPResponse {
        lock.withLock {
            switch state {
            case .resumed(let response), .abandoned(let response):
                state = .taken
                return response
            case .running, .early, .suspended, .taken: preconditionFailure("resumed without an answer")
            }
        }
    }

    /// From stop(), after the grace period.
    func abandon() {
        lock.withLock {
            let response = HTTPResponse.error(
                status: 503, code: "server_stopping",
                message: "the server stopped before this request was finished; send it again")
            switch state {
            case .running:
                state = .abandoned(response)
            case .suspended:
                state = .abandoned(response)
                MHD_resume_connection(connection)
            case .early, .resumed, .abandoned, .taken:
                break
            }
        }
    }
}
