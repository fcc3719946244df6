import Core

extension IdentityService {
    /// The device's ntfy topic URL as the registry holds it (event 41); nil when it has none. The
    /// owner's to see: whoever knows the URL can read what is sent there.
    public func ntfyTopicURL(deviceID: UInt64) -> String? {
        store.registry.read { $0.registry.ntfyTopicURL(deviceID: deviceID) }
    }
}
