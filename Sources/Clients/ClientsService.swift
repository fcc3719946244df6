import Events
import HTTP
import Identity
import Ingest
import JSON

/// The endpoints of the apps people already run (docs/clients.md). Each protocol decodes its wire
/// format into a `ClientReport` and hands it to `IngestService.submit`, the report path's one
/// entry point for apps; no protocol code lives in Ingest, and none of the report path's rules
/// (validation, durability before the answer, idempotency, the arrivals audit) lives here.
///
/// Adding a protocol: a file `<Protocol>.swift` with an `add<Protocol>Routes(to:)` extension, one
/// line in `addRoutes`, its routes in `RoutePermissions.table` (`.appDevice` when the token comes in
/// a header or the query; `.open` plus `IdentityService.appDevice(token:userName:)` when it comes
/// in the body), its `ClientProtocol` number in Events.
public final class ClientsService: Sendable {
    public let ingest: IngestService
    /// The latest positions for OwnTracks' Friends view; nil without a projection (`--projector off`).
    public let friends: (any FriendsSource)?

    public init(ingest: IngestService, friends: (any FriendsSource)? = nil) {
        self.ingest = ingest
        self.friends = friends
    }

    public func addRoutes(to router: inout GuardedRouter) {
        addOwnTracksRoutes(to: &router)
    }
}
