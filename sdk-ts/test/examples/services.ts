/**
 * The systems the seed docs' examples call (`db`, `email`, `shop`), as in-memory stand-ins
 * that note every call: the examples themselves are the docs' code.
 */

export const calls: Array<[string, ...unknown[]]> = [];

export const db = {
  users: {
    async get(userId: string) {
      calls.push(["db.users.get", userId]);
      return { id: userId, email: `${userId}@example.invalid`, createdAt: new Date(Date.UTC(2026, 0, 1)) };
    },
  },
};

export const email = {
  async send(to: string, text: string) {
    calls.push(["email.send", to, text]);
    return { to, text, sentAt: new Date() };
  },
};

export const shop = {
  async place(input: { orderId: number; amount?: string }) {
    calls.push(["shop.place", input.orderId]);
    return { id: `order-${input.orderId}`, amount: input.amount ?? "19.99" };
  },
  async cancel(orderId: number) {
    calls.push(["shop.cancel", orderId]);
    return { cancelled: orderId };
  },
  async ship(orderId: number, payment: unknown) {
    calls.push(["shop.ship", orderId, payment]);
    return { shipped: orderId, payment };
  },
};

export const payments = {
  async charge(customerId: string, amount: number) {
    calls.push(["payments.charge", customerId, amount]);
    return { chargeId: `ch_${customerId}_${amount}`, amount };
  },
};
