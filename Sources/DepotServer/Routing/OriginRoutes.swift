/// Every route of the origin, declared once: methods, path, metrics label, access, handler.
/// Adding a route is a line here and a handler method.
extension Router {
    static func originRoutes(
        reads: ReadHandlers, publishing: PublishHandlers, resumable: ResumableHandlers, operations: OperationsHandlers,
        dashboard: DashboardHandlers, rollouts: RolloutHandlers, trust: TrustHandlers, attest: AttestHandlers
    ) -> [Route] {
        let app = "/v1/apps/:app"
        return [
            Route("GET, HEAD", "/healthz", label: "healthz", access: .open, operations.health),
            Route("GET, HEAD", "/metrics", label: "metrics", access: .open, operations.metrics),

            Route("GET", "/v1/session", label: "session", access: .token, dashboard.session),
            Route("GET", app, label: "app", access: .publisher, dashboard.app),
            Route("GET", app + "/client-configuration", label: "client-configuration", access: .admin, dashboard.clientConfiguration),

            Route("GET, HEAD", app + "/manifest", label: "manifest", access: .download, reads.manifest),
            Route("GET, HEAD", app + "/releases", label: "releases", access: .download, reads.releaseList),
            Route("POST", app + "/releases", label: "publish", access: .publisher, publishing.release),
            Route("GET, HEAD", app + "/releases/:release", label: "release", access: .download, reads.release),
            Route("GET, HEAD", app + "/blobs/:sha256", label: "blob", access: .download, reads.blob),
            Route("GET, HEAD", app + "/info-plist", label: "info-plist", access: .download, reads.infoPlist),
            Route("GET, HEAD", app + "/channels", label: "channels", access: .download, reads.channelList),
            Route("GET, HEAD", app + "/channels/:channel/manifest", label: "manifest", access: .download, reads.manifest),
            Route("GET, HEAD", app + "/download-manifest", label: "download-manifest", access: .download, reads.downloadManifest),
            Route("GET, HEAD", app + "/channels/:channel/download-manifest", label: "download-manifest", access: .download, reads.downloadManifest),

            Route("PUT", app + "/packs/:pack", label: "publish", access: .publisher, receiving: publishing.upload),
            Route("DELETE", app + "/packs/:pack", label: "publish", access: .publisher, publishing.removePack),
            Route("GET", app + "/staging", label: "staging", access: .publisher, publishing.staging),
            Route("POST", app + "/rollback", label: "rollback", access: .admin, publishing.rollback),
            Route("POST", app + "/channels/:channel", label: "channels", access: .publisher, publishing.promote),
            Route("DELETE", app + "/channels/:channel", label: "channels", access: .admin, publishing.removeChannel),
            Route("POST", app + "/channels/:channel/statements", label: "statements", access: .publisher, receiving: publishing.statement),

            Route("GET", app + "/rollouts/:channel", label: "rollouts", access: .publisher, rollouts.status),
            Route("POST", app + "/rollouts/:channel/start", label: "rollouts", access: .publisher, rollouts.start),
            Route("POST", app + "/rollouts/:channel/advance", label: "rollouts", access: .publisher, rollouts.advance),
            Route("POST", app + "/rollouts/:channel/halt", label: "rollouts", access: .publisher, rollouts.halt),
            Route("POST", app + "/rollouts/:channel/complete", label: "rollouts", access: .publisher, rollouts.complete),
            Route("GET", app + "/fleet", label: "fleet", access: .publisher, rollouts.fleet),
            Route("POST", app + "/reports", label: "reports", access: .download, receiving: rollouts.report),
            // App Attest: a device's key attested once (its own bounds; see AttestHandlers).
            Route("POST", app + "/attest/challenges", label: "attest-challenges", access: .download, attest.challenge),
            Route("POST", app + "/attest/keys", label: "attest-keys", access: .download, receiving: attest.attest),
            // Trusted publishing: a CI job's OIDC token for a short-lived publish token (its own checks).
            Route("POST", app + "/oidc-token", label: "oidc-token", access: .open, trust.exchange),

            Route("OPTIONS", app + "/uploads", label: "upload", access: .open, resumable.options).adding(ResumableHandlers.protocolHeaders),
            Route("POST", app + "/uploads", label: "upload", access: .publisher, resumable.create).adding(ResumableHandlers.protocolHeaders),
            Route("OPTIONS", app + "/uploads/:upload", label: "upload", access: .open, resumable.options).adding(ResumableHandlers.protocolHeaders),
            Route("HEAD", app + "/uploads/:upload", label: "upload", access: .publisher, resumable.offset).adding(ResumableHandlers.protocolHeaders),
            Route("GET", app + "/uploads/:upload", label: "upload", access: .publisher, resumable.status).adding(ResumableHandlers.protocolHeaders),
            Route("PATCH", app + "/uploads/:upload", label: "upload", access: .publisher, receiving: resumable.append)
                .adding(ResumableHandlers.protocolHeaders),
            Route("DELETE", app + "/uploads/:upload", label: "upload", access: .publisher, resumable.terminate)
                .adding(ResumableHandlers.protocolHeaders),

            // The dashboard: any path outside the ones above.
            Route("GET, HEAD", "/*", label: "static", access: .open, operations.staticFile),
        ]
    }
}
