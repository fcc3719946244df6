import Events

extension RegistryStore {
    /// The presence of each of `deviceIDs` that is linked, at `nowMicros`. Read under the lock
    /// rather than from a copy of the registry: a copy held while a list is written would make the
    /// next append copy the registry's tables.
    public func presence(of deviceIDs: [UInt64], nowMicros: Int64) -> [UInt64: PresenceView] {
        registry.read { state in
            guard !state.registry.presence.links.isEmpty else { return [:] }
            var views: [UInt64: PresenceView] = [:]
            for id in deviceIDs {
                if let view = state.registry.presence(of: id, nowMicros: nowMicros) { views[id] = view }
            }
            return views
        }
    }
}
