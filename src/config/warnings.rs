//! What `tollgate check` warns about in a valid config: nothing wrong enough to refuse, but
//! likely not what was meant.

use super::{Config, Mode, Policy, Problem};
use crate::limit::keys::KeyBuilder;
use crate::limit::spec::IpKeys;

impl Config {
    /// Problems that do not stop the config from loading: a policy no route or layer lists (it limits
    /// nothing, which a policy added and then forgotten in a route's `policies` does
    /// silently), and an enforced policy that lets a request lacking a key part through
    /// unlimited because `on_missing_key` is not set ([`Config::missing_key_warning`]), and
    /// a `ca_file` certificate that is a self-signed CA naming hosts
    /// ([`Config::self_signed_ca_warnings`]).
    pub fn warnings(&self) -> Vec<Problem> {
        let unlisted = self
            .policies
            .iter()
            .enumerate()
            // A `[layers.NAME]` enforces its policies as a route does (tower layers).
            .filter(|(i, _)| {
                let listed = |policies: &Vec<usize>| policies.contains(i);
                !self.routes.iter().any(|r| listed(&r.policies))
                    && !self.layers.iter().any(|l| listed(&l.policies))
            })
            .map(|(_, p)| {
                Problem::new(
                    format!("policies.{}", p.name),
                    "no route lists it, so it limits nothing (add it to a route's `policies`)",
                )
            });
        let missing =
            (self.policies.iter().enumerate()).filter_map(|(i, p)| self.missing_key_warning(i, p));
        unlisted
            .chain(missing)
            .chain(self.self_signed_ca_warnings())
            .chain(self.repeated_url_warnings())
            .collect()
    }

    /// A URL listed twice: twice the share, as a weight would say, but its failures are
    /// counted and ejected apart.
    fn repeated_url_warnings(&self) -> impl Iterator<Item = Problem> + '_ {
        self.upstreams.iter().flat_map(|u| {
            (u.urls.iter().enumerate()).filter_map(move |(j, url)| {
                let i = u.urls[..j].iter().position(|earlier| earlier == url)?;
                Some(Problem::new(
                    format!("upstreams.{}.urls[{j}]", u.name),
                    format!("repeats urls[{i}], which so gets two shares of the load and two ejection counts: give urls[{i}] a weight instead"),
                ))
            })
        })
    }

    /// A `ca_file` certificate made by OpenSSL's one-line `req -x509` for a server is marked
    /// `CA:TRUE`, which webpki refuses as the server's own certificate; the upstream's
    /// verifier accepts it pinned instead (`proxy/upstream/verify.rs`). Said, because that
    /// is not what a CA file usually means, and the certificate stays a CA for this upstream
    /// too; the `-addext` that makes it an ordinary leaf is named.
    fn self_signed_ca_warnings(&self) -> impl Iterator<Item = Problem> + '_ {
        let files = (self.upstreams.iter())
            .filter_map(|u| Some((u, u.tls.as_deref()?)))
            .filter_map(|(u, tls)| Some((u, tls.ca_file.as_ref()?, &tls.self_signed_cas)));
        files.flat_map(|(u, file, certs)| {
            certs.iter().map(move |names| {
                Problem::new(
                    format!("upstreams.{}.ca_file", u.name),
                    format!(
                        "`{}` holds a self-signed CA certificate (CA:TRUE) for {}: accepted as \
                         the upstream's own certificate only when presented byte for byte \
                         (pinned), and still a CA for any certificate it signs; \
                         `-addext basicConstraints=critical,CA:FALSE` makes it a plain leaf",
                        file.display(),
                        names.join(", ")
                    ),
                )
            })
        })
    }

    /// Policy `i` is enforced on some route (neither the route's mode nor its own is
    /// shadow or off), has a key part a request can lack, and leaves `on_missing_key` unset:
    /// such a request skips the policy, which a client can do on purpose (issue 35: 5 × 200
    /// on a 3/min per-account login limit). An explicit `"skip"` says that is meant.
    fn missing_key_warning(&self, i: usize, p: &Policy) -> Option<Problem> {
        if p.on_missing_key.is_some() {
            return None;
        }
        // `path` is never missing on the gateway (every request has one); `ip`, `route`
        // and `method` never are.
        let part = p.key.iter().find(|k| k.is_sent_value())?;
        let enforced = (self.routes.iter())
            .filter(|r| r.policies.contains(&i))
            .any(|r| p.mode.unwrap_or(r.mode) == Mode::Enforce);
        if !enforced {
            return None;
        }
        let what = KeyBuilder::new(&IpKeys::default(), self.account.clone()).what(part);
        Some(Problem::new(
            format!("policies.{}.on_missing_key", p.name),
            format!(
                "not set, so a request without {what} skips this policy, unlimited by it \
                 however many are sent; set \"deny\" or \"shared\", or \"skip\" to keep this"
            ),
        ))
    }
}
