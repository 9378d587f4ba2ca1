#[zmesh_macros::service(channel = "pump", execution = parallel)]
trait Pump {
    #[idempotent(conflate)]
    async fn set_setpoint(&self, bar: f64) -> f64;
}

fn main() {}
