#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[idempotent]
    async fn set_setpoint(&self, __bar: f64) -> f64;
}

fn main() {}
