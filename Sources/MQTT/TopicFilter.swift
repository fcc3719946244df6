/// A topic filter with single-level wildcards (`owntracks/+/+`), and what they matched in a topic.
///
/// Only `+` is supported: findmy needs the user and the device of a topic, each one level, and a
/// multi-level `#` cannot say which level is which.
public struct TopicFilter: Sendable, Equatable, CustomStringConvertible {
    public let description: String
    private let levels: [Substring]

    /// nil unless `text` is levels separated by `/`, each either `+` or a name without `+`, `#`
    /// or NUL, with exactly `wildcards` of them `+`.
    public init?(_ text: String, wildcards: Int) {
        let levels = text.split(separator: "/", omittingEmptySubsequences: false)
        guard !text.isEmpty, text.utf8.count <= 65535,
            levels.allSatisfy({ $0 == "+" || !$0.contains(where: { $0 == "+" || $0 == "#" || $0 == "\0" }) }),
            levels.filter({ $0 == "+" }).count == wildcards
        else { return nil }
        description = text
        self.levels = levels
    }

    /// The levels of `topic` where the filter has `+`, in order; nil when the topic does not
    /// match (another prefix, another depth) or a wildcard level is empty.
    public func match(_ topic: String) -> [String]? {
        let parts = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == levels.count else { return nil }
        var captured: [String] = []
        for (level, part) in zip(levels, parts) {
            if level == "+" {
                guard !part.isEmpty else { return nil }
                captured.append(String(part))
            } else if level != part {
                return nil
            }
        }
        return captured
    }

    /// The topic this filter matches with `values` at its wildcards, in order (the inverse of
    /// `match`); nil when a value is empty or holds `/`, `+`, `#` or NUL, or the count differs.
    public func topic(filling values: [String]) -> String? {
        guard values.count == levels.filter({ $0 == "+" }).count,
            values.allSatisfy({ !$0.isEmpty && !$0.contains(where: { "/+#\0".contains($0) }) })
        else { return nil }
        var remaining = values[...]
        return levels.map { level in level == "+" ? remaining.popFirst()! : String(level) }.joined(
            separator: "/")
    }
}
