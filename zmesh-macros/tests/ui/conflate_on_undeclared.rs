#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[conflate]
    async fn set_setpoint(&self, bar: f64) -> f64;
}

fn main() {}
