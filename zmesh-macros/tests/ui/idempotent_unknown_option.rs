#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[idempotent(coalesce)]
    async fn set_setpoint(&self, bar: f64) -> f64;
}

fn main() {}
